package reclaim

import (
	"strings"
	"testing"
)

func FuzzParseLocks(f *testing.F) {
	f.Add("1: POSIX  ADVISORY  WRITE 1234 08:01:131 0 EOF\n2: FLOCK  ADVISORY  WRITE 99 00:1f:7 0 EOF\n")
	f.Add("3: OFDLCK ADVISORY  READ  -1 fd:00:42 0 EOF\n3: -> OFDLCK ADVISORY  READ  -1 fd:00:42 0 EOF\n")
	f.Add("garbage\n\n4: POSIX x y z zz:zz:zz")
	f.Fuzz(func(t *testing.T, s string) {
		m := parseLocks([]byte(s))
		for k := range m {
			_ = k.ino
		}
	})
}

func TestParseLocks(t *testing.T) {
	m := parseLocks([]byte("1: POSIX  ADVISORY  WRITE 1234 08:01:131 0 EOF\n2: -> FLOCK  ADVISORY  WRITE 99 fd:1f:7 0 EOF\n"))
	if !m[lockKey{8, 1, 131}] || !m[lockKey{0xfd, 0x1f, 7}] || len(m) != 2 {
		t.Errorf("parsed %v", m)
	}
}

func TestValidateCacheRoots(t *testing.T) {
	errs := ValidateCacheRoots([]CacheConfig{
		{Name: "a", Path: "/home"},
		{Name: "b", Path: "/srv/cache"},
		{Name: "b", Path: "relative"},
		{Name: "c", Path: "/"},
		{Name: "d", Path: "/"[:1] + "data"},
	}, []string{"/home/u", "/root"}, "/data/mnt", "/srv/cache")
	var got []string
	for _, e := range errs {
		got = append(got, e.Error())
	}
	all := strings.Join(got, "\n")
	for _, want := range []string{"reclaim.cache[0].path: /home is or contains the protected path /home/u", "reclaim.cache[2].name", "reclaim.cache[2].path", "reclaim.cache[3].path", "reclaim.cache[4].path: /data contains the mount point /data/mnt"} {
		if !strings.Contains(all, want) {
			t.Errorf("missing %q in:\n%s", want, all)
		}
	}
	if strings.Contains(all, "reclaim.cache[1]") {
		t.Errorf("a cache root that is itself a mount point is fine:\n%s", all)
	}
}

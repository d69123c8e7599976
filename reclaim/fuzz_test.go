package reclaim

import (
	"strings"
	"testing"
)

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

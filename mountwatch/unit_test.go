package mountwatch

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/fusetest"
)

const sampleMountinfo = `22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/root rw
97 22 0:52 / /mnt/my\040agent rw,nosuid,nodev,relatime shared:50 - fuse.geesefs bucket:\040x rw,user_id=1000,group_id=1000
98 22 0:53 / /mnt/plain rw - fuse sshfs#host: rw,user_id=0,group_id=0,allow_other
99 22 0:54 / /mnt/plain rw - tmpfs tmpfs rw,size=1024k
garbage line
`

func TestParseMountinfo(t *testing.T) {
	es, err := parseMountinfo([]byte(sampleMountinfo))
	if err == nil {
		t.Error("a malformed line should be reported")
	}
	if len(es) != 4 {
		t.Fatalf("got %d entries, want 4", len(es))
	}
	g := es[1]
	if g.MountPoint != "/mnt/my agent" || g.Source != "bucket: x" || g.FSType != "fuse.geesefs" {
		t.Errorf("escapes not decoded: %+v", g)
	}
	if g.UserID != 1000 || g.GroupID != 1000 || g.Minor != 52 || g.MountID != 97 {
		t.Errorf("owner or connection wrong: %+v", g)
	}
	if !isFUSE(g.FSType) || !isFUSE("fuse") || !isFUSE("fuseblk") || isFUSE("fusectl") {
		t.Error("isFUSE wrong")
	}
	top, ok := topmostAt(es, "/mnt/plain")
	if !ok || top.FSType != "tmpfs" {
		t.Errorf("topmost at /mnt/plain = %+v, want the tmpfs stacked last", top)
	}
	if es[0].UserID != -1 {
		t.Errorf("no user_id should be -1, got %d", es[0].UserID)
	}
}

func FuzzParseMountinfo(f *testing.F) {
	f.Add([]byte(sampleMountinfo))
	f.Add([]byte("1 2 0:1 / /x rw - fuse a user_id=\n"))
	f.Add([]byte("1 2 x:y / / - - -\n"))
	f.Add([]byte(`1 2 0:3 / /\1 rw - f s o=\377` + "\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		es, _ := parseMountinfo(b)
		for _, e := range es {
			if e.SuperOpts == nil {
				t.Fatal("nil options")
			}
		}
	})
}

func TestClassify(t *testing.T) {
	cases := []struct {
		op, errno, want string
	}{
		{"lookup", "EACCES", api.MountDenied},
		{"create", "EPERM", api.MountDenied},
		{"write", "EINVAL", api.MountDenied},
		{"readdir", "EINVAL", api.MountDisconnected},
		{"lookup", "ENOTCONN", api.MountDisconnected},
		{"opendir", "ECONNABORTED", api.MountDisconnected},
		{"lookup", "ENODEV", api.MountDisconnected},
		{"fsync", "EIO", api.MountDisconnected},
		{"lookup", "ESTALE", api.MountDisconnected},
	}
	for _, c := range cases {
		if got := classify(probeResult{Op: c.op, Errno: c.errno}); got != c.want {
			t.Errorf("classify(%s %s) = %s, want %s", c.op, c.errno, got, c.want)
		}
	}
}

func TestProbeMain(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	if code := ProbeMain([]string{"--path", dir, "--canary"}, &out); code != 0 {
		t.Fatalf("healthy dir: exit %d, %s", code, out.String())
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("canary left behind: %v", ents)
	}
	out.Reset()
	code := ProbeMain([]string{"--path", filepath.Join(dir, "absent")}, &out)
	var r probeResult
	if err := json.Unmarshal(out.Bytes(), &r); err != nil || code != 1 || r.OK || r.Errno != "ENOENT" || r.Op != "opendir" {
		t.Fatalf("absent dir: exit %d, %s", code, out.String())
	}
	out.Reset()
	if code := ProbeMain([]string{"--path", "relative"}, &out); code != 2 {
		t.Fatalf("relative path: exit %d", code)
	}
}

// The refresh point is refresh_at of the lifetime from the file's mtime (minus up to 5%
// jitter), and due is judged on the wall clock.
func TestCredentialRefreshPoint(t *testing.T) {
	p := filepath.Join(t.TempDir(), "cred.json")
	issued := time.Now().Add(-10 * time.Minute).Truncate(time.Second)
	if err := fusetest.WriteCred(p, issued.Add(100*time.Minute)); err != nil {
		t.Fatal(err)
	}
	os.Chtimes(p, issued, issued)
	c, _, err := readCredential(p, 0.8)
	if err != nil {
		t.Fatal(err)
	}
	lo, hi := issued.Add(75*time.Minute), issued.Add(80*time.Minute)
	if c.refreshAt.Before(lo) || c.refreshAt.After(hi) {
		t.Fatalf("refresh at %v, want within [%v, %v]", c.refreshAt, lo, hi)
	}
	if c.due(time.Now()) || !c.due(issued.Add(81*time.Minute)) || c.expired(time.Now()) || !c.expired(issued.Add(100*time.Minute)) {
		t.Fatal("due/expired wrong")
	}
	os.WriteFile(p, []byte(`{"Expiration":"soon"}`), 0o644)
	if _, _, err := readCredential(p, 0.8); err == nil {
		t.Fatal("bad Expiration accepted")
	}
}

func TestConfigValidation(t *testing.T) {
	_, err := New(Options{Mounts: []MountConfig{{Name: "a", Path: "rel"}, {Name: "a", Path: "/x", RefreshAt: 2},
		{Name: "b", Path: "/y", Links: []LinkConfig{{Path: "/y/l", Target: "/y"}}}}, ProbeCommand: []string{"x"}})
	if err == nil {
		t.Fatal("invalid config accepted")
	}
	for _, want := range []string{`"a": path "rel" must be absolute`, "two entries with one name", "refresh_at", "outside the mount"} {
		if !bytes.Contains([]byte(err.Error()), []byte(want)) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

package pressure

import (
	"os"
	"path/filepath"
	"testing"
)

const sampleMountinfo = `22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
23 22 0:21 / /proc rw,nosuid - proc proc rw
40 22 0:45 / /tmp rw shared:7 master:2 - tmpfs tmpfs rw,size=65536k
41 22 0:46 / /mnt/my\040disk rw - tmpfs my\134src rw
42 22 8:1 /srv/data /data rw - ext4 /dev/sda1 rw
43 22 0:47 / /mnt/my\040disk/inner rw - fuse.geesefs bucket rw
bad line
44 22 x:y / /bad rw - ext4 /dev/x rw
45 22 0:48 / /nofstype rw -
`

func TestForDeviceAndLexicalMount(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "self"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "self", "mountinfo"), []byte(sampleMountinfo), 0o644); err != nil {
		t.Fatal(err)
	}
	mt := newMountTable(dir)
	cases := []struct {
		path       string
		maj, min   uint32
		mountpoint string
	}{
		{"/data/x", 8, 1, "/data"},    // the bind mount that holds the path, deepest
		{"/home/u", 8, 1, "/"},        // the root mount
		{"/elsewhere", 0, 45, "/tmp"}, // device matches, path does not: deepest match
		{"/mnt/my disk/a", 0, 46, "/mnt/my disk"},
	}
	for _, c := range cases {
		e, ok := mt.forDevice(c.path, c.maj, c.min)
		if !ok || e.MountPoint != c.mountpoint {
			t.Errorf("forDevice(%s, %d:%d) = %+v, %v; want %s", c.path, c.maj, c.min, e, ok, c.mountpoint)
		}
	}
	if _, ok := mt.forDevice("/x", 9, 9); ok {
		t.Error("unknown device found")
	}
	if got := mt.lexicalMount("/mnt/my disk/inner/f"); got != "/mnt/my disk/inner" {
		t.Errorf("lexicalMount = %q", got)
	}
	if got := mt.lexicalMount("/mnt/my diskette"); got != "/" {
		t.Errorf("lexicalMount of a sibling name = %q, want /", got)
	}
}

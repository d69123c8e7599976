package pressure

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/units"
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

func TestParseMountinfo(t *testing.T) {
	es := parseMountinfo([]byte(sampleMountinfo))
	if len(es) != 6 {
		t.Fatalf("%d entries, want 6: %+v", len(es), es)
	}
	if e := es[3]; e.Mountpoint != "/mnt/my disk" || e.Source != `my\src` || e.device() != "0:46" {
		t.Errorf("escaped entry = %+v", e)
	}
	if e := es[2]; e.FSType != "tmpfs" || e.Mountpoint != "/tmp" {
		t.Errorf("optional fields entry = %+v", e)
	}
}

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
		if !ok || e.Mountpoint != c.mountpoint {
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

func TestUnescapeOctal(t *testing.T) {
	for in, want := range map[string]string{
		`a\040b`: "a b", `\011\012\134`: "\t\n\\", `trail\04`: `trail\04`,
		`\777`: `\777`, `\08x`: `\08x`, `plain`: "plain",
	} {
		if got := unescapeOctal(in); got != want {
			t.Errorf("unescapeOctal(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzParseMountinfo(f *testing.F) {
	for _, l := range strings.Split(sampleMountinfo, "\n") {
		f.Add(l)
	}
	f.Add(`1 2 3:4 / /a\0 - x`)
	f.Add(`1 2 4294967295:4294967296 / / rw - - - -`)
	f.Fuzz(func(t *testing.T, line string) {
		e, ok := parseMountinfoLine(line)
		if !ok {
			return
		}
		_ = e.device()
		_ = underMount("/x/y", e.Mountpoint)
		if !strings.Contains(line, `\`) && !strings.Contains(line, e.Mountpoint) {
			t.Errorf("mountpoint %q not in %q", e.Mountpoint, line)
		}
	})
}

func TestAdaptiveThresholdCapped(t *testing.T) {
	cfg := FSConfig{ReclaimBelow: units.Threshold{Amount: 1 << 30}}
	// 1 MiB/s × 10m = 600 MiB: below the configured 1 GiB, which stays.
	if r := resolveThresholds(cfg, 100<<30, 0, 1<<20, 600e9); r.reclaim != 1<<30 || r.why != "reclaim_below 1.0 GiB" {
		t.Errorf("slow growth: %d %q", r.reclaim, r.why)
	}
	// 3 MiB/s × 10m = 1800 MiB on a 100 GiB disk.
	r := resolveThresholds(cfg, 100<<30, 0, 3<<20, 600e9)
	if r.reclaim != 1800<<20 || r.why != "growth 3.0 MiB/s × lead_time 10m" {
		t.Errorf("adaptive: %d %q", r.reclaim, r.why)
	}
	// 1 GiB/s: capped at 10 GiB on a big disk, at 25% on a small one, never below config.
	if r := resolveThresholds(cfg, 1<<40, 0, 1<<30, 600e9); r.reclaim != 10<<30 {
		t.Errorf("cap 10 GiB: %d", r.reclaim)
	}
	if r := resolveThresholds(cfg, 8<<30, 0, 1<<30, 600e9); r.reclaim != 2<<30 {
		t.Errorf("cap 25%%: %d", r.reclaim)
	}
	if r := resolveThresholds(cfg, 2<<30, 0, 1<<30, 600e9); r.reclaim != 1<<30 {
		t.Errorf("cap below the configured value: %d", r.reclaim)
	}
	// A configured 0 means never, whatever the growth.
	if r := resolveThresholds(FSConfig{}, 100<<30, 0, 1<<30, 600e9); r.reclaim != 0 {
		t.Errorf("disabled threshold became %d", r.reclaim)
	}
}

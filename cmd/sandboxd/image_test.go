package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// TestImageCommands: `sandboxd image check` of an ext4 image with no reserve says so in one
// line and in --json; `recover` of it frees nothing, exits 12 and says how far short it is
// and what sizes the disk; a file that is no image is 65. (The in-use refusals and a real
// recovery are internal/e2image's tests, on loop-mounted images.)
func TestImageCommands(t *testing.T) {
	testenv.RequireCommand(t, "dumpe2fs")
	img := testenv.Ext4Image(t, 8<<20)
	r := sandboxd(t, nil, "image", "check", img)
	if r.code != 0 || !strings.HasPrefix(r.stdout, img+": ") || !strings.Contains(r.stdout, "journal clean; no sandboxd reserve inside (looked at /.sandboxd-reserve, /var/lib/sandboxd/reserve)") ||
		strings.Count(r.stdout, "\n") != 1 {
		t.Fatalf("image check: exit %d: %q %s", r.code, r.stdout, r.stderr)
	}
	r = sandboxd(t, nil, "image", "check", "--json", img)
	var rep struct {
		SizeBytes uint64 `json:"size_bytes"`
		Journal   string `json:"journal"`
		Files     uint64 `json:"files"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || rep.SizeBytes != 8<<20 || rep.Journal != "clean" || rep.Files == 0 {
		t.Fatalf("image check --json: %v: %s", err, r.stdout)
	}
	r = sandboxd(t, nil, "image", "recover", "--size-setting", "[openshell.drivers.vm] overlay_disk_mib", img)
	if r.code != 12 || !strings.Contains(r.stdout, "nothing freed") || !strings.Contains(r.stdout, "raising [openshell.drivers.vm] overlay_disk_mib") {
		t.Fatalf("image recover without a reserve: exit %d: %s %s", r.code, r.stdout, r.stderr)
	}
	junk := filepath.Join(t.TempDir(), "junk")
	os.WriteFile(junk, []byte("not a filesystem"), 0o644)
	if r = sandboxd(t, nil, "image", "check", junk); r.code != 65 || !strings.Contains(r.stderr, "not an ext2/ext3/ext4 image") {
		t.Fatalf("image check of junk: exit %d: %s", r.code, r.stderr)
	}
}

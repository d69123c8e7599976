package mountwatch

import (
	"os"
	"path/filepath"
	"testing"
)

// A link path taken by a file with data is reported in the numbers style of every other
// message (issue 14 item 6): "12,345 bytes", not "12345 bytes".
func TestOccupiedLinkDetailUsesThousandsSeparators(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "link")
	if err := os.WriteFile(p, make([]byte, 12345), 0o644); err != nil {
		t.Fatal(err)
	}
	state, detail := inspectLink(LinkConfig{Path: p, Target: filepath.Join(dir, "target")})
	if state != LinkOccupied || detail != "a regular file of 12,345 bytes" {
		t.Fatalf("inspectLink = %q, %q; want %q, %q", state, detail, LinkOccupied, "a regular file of 12,345 bytes")
	}
}

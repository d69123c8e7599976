package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// `sandboxd status` names what sizes a filesystem on its lines (issue 10, item 9).
func TestStatusNamesTheSizeSetting(t *testing.T) {
	mnt := testenv.Tmpfs(t, 8<<20, 0)
	_, sock, _ := serveDaemon(t, t.TempDir(), fmt.Sprintf(`site = []
[[filesystem]]
path = %q
reserve = "0"
size_setting = "[openshell.drivers.vm] overlay_disk_mib"
`, mnt))
	r := sandboxd(t, nil, "status", "--socket="+sock)
	if r.code != 0 || !strings.Contains(r.stdout, "this disk is sized by [openshell.drivers.vm] overlay_disk_mib") {
		t.Fatalf("status: %d\n%s", r.code, r.stdout)
	}
}

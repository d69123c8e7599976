package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// TestRunIDCannotBeSquatted (issue 21 case 3): uid 65534, a writer, takes the id
// "build-1" first (`sandboxd run --id build-1 --detach`); root's `sandboxd run --id
// build-1` still runs (it was refused with 409 conflict, then exit 65), because ids are
// each owner's own. Within one owner an id is still one job: 65534's second `run --id
// build-1` is refused with conflict (exit 125, run's own refusal). Root ends 65534's with
// `sandboxd jobs end --owner 65534 build-1`.
func TestRunIDCannotBeSquatted(t *testing.T) {
	root := testenv.CgroupRoot(t)
	base := openTempDir(t)
	bin := filepath.Join(base, "sandboxd")
	if b, err := os.ReadFile(binary); err != nil || os.WriteFile(bin, b, 0o755) != nil {
		t.Fatalf("copy the binary where uid %d may run it: %v", nobody, err)
	}
	mnt := testenv.Tmpfs(t, 8<<20, 0)
	cfg := fmt.Sprintf("[[filesystem]]\npath = %q\nreclaim_below = \"1MiB\"\nreplace_below = \"512KiB\"\nreserve = \"0\"\n[jobs]\ncgroup_root = %q\ngrace = \"200ms\"\n", mnt, root)
	server := fmt.Sprintf("writers = [\"uid:%d\"]\nsocket_mode = \"0666\"", nobody)
	dir := filepath.Join(base, "d")
	os.Mkdir(dir, 0o755)
	_, sock, logs := serveDaemonIn(t, dir, cfg, server, nil)

	if code, stderr := asNobody(t, bin, "run", "--socket", sock, "--id", "build-1", "--detach", "--", "sleep", "600"); code != 0 {
		t.Fatalf("uid 65534 takes build-1: exit %d: %s\n%s", code, stderr, logs.String())
	}
	if r := sandboxd(t, nil, "run", "--socket", sock, "--id", "build-1", "--", "true"); r.code != 0 {
		t.Errorf("root's sandboxd run --id build-1 after 65534 took it: exit %d, stderr %q; want 0", r.code, r.stderr)
	}
	if code, stderr := asNobody(t, bin, "run", "--socket", sock, "--id", "build-1", "--", "true"); code != 125 || !strings.Contains(stderr, "conflict") {
		t.Errorf("65534's second run --id build-1: exit %d (%s); want 125 conflict, its own id is taken", code, stderr)
	}
	// The table tells the two apart: root's build-1 (ended) and 65534's build-1@65534.
	if r := sandboxd(t, nil, "jobs", "list", "--socket", sock); r.code != 0 || !strings.Contains(r.stdout, "build-1@65534 ") || !strings.Contains(r.stdout, "\nbuild-1 ") {
		t.Errorf("sandboxd jobs list: exit %d\n%s", r.code, r.stdout)
	}
	// Root ends 65534's build-1 by naming its owner (sandboxd jobs end --owner, ?owner=);
	// the answer comes once it is empty.
	if r := sandboxd(t, nil, "jobs", "end", "--socket", sock, "--owner", fmt.Sprint(nobody), "build-1"); r.code != 0 {
		t.Fatalf("root's jobs end --owner %d build-1: exit %d, stderr %q", nobody, r.code, r.stderr)
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: client.DialUnix(sock)}, Timeout: 30 * time.Second}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get(fmt.Sprintf("http://sandboxd/v1/jobs/build-1?owner=%d", nobody))
	if err != nil {
		t.Fatal(err)
	}
	var j api.Job
	json.NewDecoder(resp.Body).Decode(&j)
	resp.Body.Close()
	if resp.StatusCode != 200 || j.Owner == nil || j.Owner.UID != nobody || j.State != api.JobKilled {
		t.Errorf("65534's build-1 after root's jobs end --owner: %d %+v", resp.StatusCode, j)
	}
}

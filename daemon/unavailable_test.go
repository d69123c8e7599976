package daemon

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/fusetest"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// Issue 10: a watched filesystem whose statfs fails for a reason other than the deadline
// (a path removed: ENOENT; a FUSE server that died: ENOTCONN) is never `healthy`, never a
// 500 `internal`, and never reclaimed: filesystem_unavailable (503), a critical
// FilesystemUnavailable condition, and a resume that answers for the measured
// filesystems with the others named.

// hashFiles hashes every regular file under the dirs, by path.
func hashFiles(t *testing.T, dirs ...string) map[string][32]byte {
	t.Helper()
	out := map[string][32]byte{}
	for _, d := range dirs {
		filepath.Walk(d, func(p string, fi os.FileInfo, err error) error {
			if err == nil && fi.Mode().IsRegular() {
				b, _ := os.ReadFile(p)
				out[p] = sha256.Sum256(b)
			}
			return nil
		})
	}
	return out
}

func sameFiles(t *testing.T, before map[string][32]byte, dirs ...string) {
	t.Helper()
	after := hashFiles(t, dirs...)
	for p, h := range before {
		if a, ok := after[p]; !ok || a != h {
			t.Errorf("%s was deleted or changed by a call that could not measure its filesystem", p)
		}
	}
}

func (td *testDaemon) fsStatus(t *testing.T, path string) api.Filesystem {
	t.Helper()
	for _, f := range td.status(t).Filesystems {
		if f.Path == path {
			return f
		}
	}
	t.Fatalf("no filesystem %s in /v1/status", path)
	return api.Filesystem{}
}

// unavailableProblemOf decodes a problem answer and checks its status and code.
func unavailableProblemOf(t *testing.T, what string, code int, ctype, body string, want api.Code) api.Problem {
	t.Helper()
	var p api.Problem
	if err := json.Unmarshal([]byte(body), &p); err != nil || code != 503 || ctype != api.ProblemContentType || p.Code != want {
		t.Fatalf("%s: %d %s %s, want 503 %s", what, code, ctype, body, want)
	}
	return p
}

// unavailableCondition is the FilesystemUnavailable condition about path, if any.
func (td *testDaemon) unavailableCondition(t *testing.T, path string) (api.Condition, int) {
	t.Helper()
	code, _, body := td.do(t, "GET", "/v1/health", "")
	var h api.Health
	if err := json.Unmarshal([]byte(body), &h); err != nil {
		t.Fatalf("health: %d %s", code, body)
	}
	for _, c := range h.Conditions {
		if c.Type == api.CondFilesystemUnavailable && c.Subject == path {
			return c, code
		}
	}
	return api.Condition{}, code
}

func TestRemovedWatchedPathIsFilesystemUnavailable(t *testing.T) {
	testenv.RequireRoot(t)
	good := testenv.Tmpfs(t, 16<<20, 0)
	bad := testenv.Tmpfs(t, 16<<20, 0)
	watched, cache, site := filepath.Join(bad, "watched"), filepath.Join(bad, "cache"), filepath.Join(bad, "site")
	for _, d := range []string{watched, cache, site} {
		os.Mkdir(d, 0o755)
	}
	// bad holds an old cache entry the ladder would take once it is below its threshold.
	testenv.Fill(filepath.Join(cache, "pkg.tgz"), 1<<20)
	old := time.Now().Add(-48 * time.Hour)
	os.Chtimes(filepath.Join(cache, "pkg.tgz"), old, old)
	testenv.Fill(filepath.Join(site, "job.out"), 4<<10)
	td := startDaemon(t, fmt.Sprintf(`[[site]]
name = "s"
path = %q
[[filesystem]]
path = %q
reclaim_below = "1MiB"
replace_below = "0"
reserve = "0"
[[filesystem]]
path = %q
reclaim_below = "8MiB"
replace_below = "0"
reserve = "0"
[[reclaim.cache]]
name = "pkgs"
path = %q
[[mount]]
name = "gone"
path = %q
required = false
`, site, good, watched, cache, filepath.Join(good, "nomount")), probeSelf)
	poll(t, time.Minute, "the first sample of "+watched, func() bool { return !td.fsStatus(t, watched).SampledAt.IsZero() })
	lastGood := td.fsStatus(t, watched).SampledAt

	removedAt := time.Now().Add(-time.Second)
	if err := os.Remove(watched); err != nil {
		t.Fatal(err)
	}
	poll(t, time.Minute, "/v1/status to show ENOENT for "+watched, func() bool { return td.fsStatus(t, watched).Errno == "ENOENT" })
	// Now below its threshold, unseen: a daemon that reclaimed it would take the cache entry.
	testenv.Fill(filepath.Join(bad, "userdata"), 13<<20)
	before := hashFiles(t, bad)
	f := td.fsStatus(t, watched)
	if f.ErrorSince == nil || f.ErrorSince.Before(removedAt) || !strings.Contains(f.Error, "no such file or directory") ||
		f.SampledAt.Before(lastGood) || !f.SampledAt.Before(*f.ErrorSince) {
		t.Errorf("status of the removed path: error %q since %v, sampled_at %v (last good %v)", f.Error, f.ErrorSince, f.SampledAt, lastGood)
	}

	// /v1/health: critical, with a condition naming the path, the errno, since when and
	// the last good sample.
	c, hcode := td.unavailableCondition(t, watched)
	if hcode != 503 || !c.Status || c.Severity != api.HealthCritical || c.Reason != "StatfsFailed" ||
		!strings.Contains(c.Message, watched+" cannot be measured") || !strings.Contains(c.Message, "(ENOENT)") ||
		!strings.Contains(c.Message, "failing since ") || !strings.Contains(c.Message, "last good sample at ") {
		t.Errorf("health %d, FilesystemUnavailable: %+v", hcode, c)
	}

	// Resume answers for the measured filesystem and names the other; never cached.
	for i := 0; i < 2; i++ {
		code, _, body := td.do(t, "POST", "/v1/resume", "{}")
		var run api.ReclaimRun
		if err := json.Unmarshal([]byte(body), &run); err != nil || code != 200 {
			t.Fatalf("resume: %d %s", code, body)
		}
		if len(run.After) != 1 || run.After[0].Path != good || len(run.Unmeasured) != 1 || run.Unmeasured[0].Path != watched ||
			run.Unmeasured[0].Errno != "ENOENT" || run.Cached || len(run.Actions) != 0 ||
			!strings.Contains(run.Detail, "not measured, so no verdict for it: "+watched+" cannot be measured") {
			t.Errorf("resume %d: %s", i, body)
		}
	}
	// A real reclaim likewise: it climbs no ladder on the filesystem it cannot measure.
	code, _, body := td.do(t, "POST", "/v1/reclaim", "{}")
	if code != 200 || !strings.Contains(body, `"unmeasured"`) || strings.Contains(body, `"delete"`) {
		t.Errorf("reclaim: %d %s", code, body)
	}

	// A launch on a site of that filesystem: 503 filesystem_unavailable, not 500 internal.
	code, ctype, body := td.do(t, "POST", "/v1/launch", `{"site":"s"}`)
	p := unavailableProblemOf(t, "launch on the filesystem of the removed path", code, ctype, body, api.CodeFilesystemUnavailable)
	if !strings.Contains(p.Detail, watched+" cannot be measured") || !strings.Contains(p.Detail, "(ENOENT)") ||
		!strings.Contains(p.Detail, "last good sample at ") || p.Filesystem == nil || p.Filesystem.Path != watched {
		t.Errorf("launch refusal: %s", body)
	}
	// With a mount down too, both are named, in CONTRACT §3's order.
	code, ctype, body = td.do(t, "POST", "/v1/launch", `{"site":"s","mounts":["gone"]}`)
	p = unavailableProblemOf(t, "launch needing a missing mount", code, ctype, body, api.CodeMountUnavailable)
	if !strings.Contains(p.Detail, "mount gone") || !strings.Contains(p.Detail, "also filesystem_unavailable: "+watched+" cannot be measured") {
		t.Errorf("launch refusal with a mount down: %s", body)
	}
	sameFiles(t, before, bad)

	// Back: the condition clears at once and resume measures it again.
	os.Mkdir(watched, 0o755)
	poll(t, time.Minute, "FilesystemUnavailable to clear", func() bool {
		c, _ := td.unavailableCondition(t, watched)
		return c.Type != "" && !c.Status
	})
	if f := td.fsStatus(t, watched); f.Error != "" || f.Errno != "" || f.ErrorSince != nil {
		t.Errorf("status after the path is back: %+v", f)
	}
	code, _, body = td.do(t, "POST", "/v1/resume", `{"deadline":"20s"}`)
	if code != 200 || strings.Contains(body, `"unmeasured"`) {
		t.Errorf("resume after the path is back: %d %s", code, body)
	}
}

func TestDeadFUSEWatchedFilesystemIsUnavailable(t *testing.T) {
	testenv.RequireRoot(t)
	dir := mountDir(t, "fs")
	srv := fusetest.Start(t, dir, fusetest.Options{})
	keep := filepath.Join(srv.Backing, "kept")
	testenv.Fill(keep, 64<<10)
	before := hashFiles(t, srv.Backing)
	td := startDaemon(t, fmt.Sprintf("site = []\n[[filesystem]]\npath = %q\nreserve = \"0\"\n", dir))
	poll(t, time.Minute, "the first sample of "+dir, func() bool { return !td.fsStatus(t, dir).SampledAt.IsZero() })

	srv.Kill()
	poll(t, time.Minute, "/v1/status to show the dead server's errno", func() bool {
		e := td.fsStatus(t, dir).Errno
		return e == "ENOTCONN" || e == "ECONNABORTED"
	})
	// A killed server's mount answers ENOTCONN or ECONNABORTED, and one sample may give the
	// one and the next the other: either names the disconnect.
	disconnected := func(s string) bool { return strings.Contains(s, "(ENOTCONN)") || strings.Contains(s, "(ECONNABORTED)") }
	want := []string{dir + " cannot be measured", "failing since ", "last good sample at "}
	for _, call := range []struct{ path, body string }{
		{"/v1/resume", "{}"}, {"/v1/launch", "{}"}, {"/v1/reclaim", "{}"}, {"/v1/reclaim", `{"dry_run":true}`},
	} {
		code, ctype, body := td.do(t, "POST", call.path, call.body)
		p := unavailableProblemOf(t, call.path+" "+call.body, code, ctype, body, api.CodeFilesystemUnavailable)
		for _, w := range want {
			if !strings.Contains(p.Detail, w) {
				t.Errorf("%s %s: detail %q lacks %q", call.path, call.body, p.Detail, w)
			}
		}
		if !disconnected(p.Detail) {
			t.Errorf("%s %s: detail %q names neither ENOTCONN nor ECONNABORTED", call.path, call.body, p.Detail)
		}
	}
	c, hcode := td.unavailableCondition(t, dir)
	if hcode != 503 || !c.Status || c.Severity != api.HealthCritical || !disconnected(c.Message) {
		t.Errorf("health %d, FilesystemUnavailable: %+v", hcode, c)
	}
	sameFiles(t, before, srv.Backing)
}

package reclaim

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// goEnvFor runs the go command against the test's own caches only.
func goEnvFor(root string) []string {
	return append(os.Environ(), "GOCACHE="+filepath.Join(root, "home/u/.cache/go-build"), "GOTOOLCHAIN=local", "GOPROXY=off",
		"GOFLAGS=", "GOENV=off", "GOPATH="+filepath.Join(root, "gopath"), "GOMODCACHE="+filepath.Join(root, "gopath/mod"), "GOTELEMETRY=off")
}

func goBuild(t *testing.T, root, proj string) {
	t.Helper()
	cmd := exec.Command("go", "build", "./...")
	cmd.Dir = proj
	cmd.Env = goEnvFor(root)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
}

// A real Go build cache, made by go build, is wiped with `go clean -cache` run against
// that cache only (GOCACHE), and go build works afterwards.
func TestRealGoBuildCacheIsReclaimedAndGoStillBuilds(t *testing.T) {
	testenv.RequireCommand(t, "go")
	e := newEnv(t, 64*mib, 0)
	e.reclaimBelow, e.replaceBelow = 8*mib, 2*mib
	proj := filepath.Join(e.home, "proj")
	writeFileStr(t, filepath.Join(proj, "go.mod"), "module p\ngo 1.26\n")
	writeFileStr(t, filepath.Join(proj, "a", "a.go"), "package a\n\nfunc F() int { return 1 }\n")
	writeFileStr(t, filepath.Join(proj, "b", "b.go"), "package b\n\nimport \"p/a\"\n\nfunc G() int { return a.F() + 1 }\n")
	goBuild(t, e.root, proj)
	cache := filepath.Join(e.home, ".cache", "go-build")
	if countFiles(cache) < 3 {
		t.Fatalf("go build left %d files in its cache", countFiles(cache))
	}
	e.fillTo(filepath.Join(e.home, "bulk.bin"), 4*mib)
	// Headroom larger than what the cache holds: the ladder must reach rung 4. The cache
	// is fresh (younger than MinAge), so rung 3 leaves it and the wipe command runs.
	o := e.options()
	o.Headroom = 1 * mib
	o.LookPath = exec.LookPath
	o.AutoCaches = []string{"go-build"}
	r := e.newReclaimer(o)
	run, err := r.Reclaim(context.Background(), Request{Trigger: TriggerManual, TargetFree: int64(e.avail()) + 8*mib})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("detail: %s", run.Detail)
	var ran bool
	for _, a := range run.Actions {
		if a.Kind == api.ActionCommand && strings.Contains(a.Path, "go clean -cache") {
			ran = a.Status == api.ActionDone
			if !ran {
				t.Errorf("go clean -cache: %+v", a)
			}
		}
	}
	if !ran {
		t.Fatalf("go clean -cache did not run: %+v", run.Actions)
	}
	if n := countFiles(cache); n > 3 {
		t.Errorf("go-build cache still has %d files after go clean -cache", n)
	}
	goBuild(t, e.root, proj)
	if countFiles(cache) < 3 {
		t.Errorf("go build after reclaim did not refill its cache")
	}
}

func writeFileStr(t testing.TB, p, s string) {
	t.Helper()
	mustMkdir(t, filepath.Dir(p))
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A gc command that hangs is killed (its whole process group) at the timeout, one that
// fails is reported failed, and the ladder goes on to the entries either way.
func TestHangingAndFailingCommandsDoNotStopTheLadder(t *testing.T) {
	e := newEnv(t, 128*mib, 0)
	bin := t.TempDir()
	pidFile := filepath.Join(bin, "child.pid")
	writeFileStr(t, filepath.Join(bin, "hang.sh"), "#!/bin/sh\nsleep 300 &\necho $! > "+pidFile+"\nwait\n")
	writeFileStr(t, filepath.Join(bin, "fail.sh"), "#!/bin/sh\necho broken store >&2\nexit 3\n")
	os.Chmod(filepath.Join(bin, "hang.sh"), 0o755)
	os.Chmod(filepath.Join(bin, "fail.sh"), 0o755)
	for _, n := range []string{"c1", "c2"} {
		for i := 0; i < 20; i++ {
			writeFile(t, filepath.Join(e.root, n, "e"+string(rune('a'+i))), mib, 5*time.Hour)
		}
	}
	e.fillTo(filepath.Join(e.home, "bulk.bin"), 40*mib)
	o := e.options()
	o.CommandTimeout = 500 * time.Millisecond
	o.Caches = []CacheConfig{
		{Name: "c1", Path: filepath.Join(e.root, "c1"), Command: []string{filepath.Join(bin, "hang.sh")}, Order: 1},
		{Name: "c2", Path: filepath.Join(e.root, "c2"), Command: []string{filepath.Join(bin, "fail.sh")}, Order: 2},
	}
	o.LookPath = onlyTools()
	r := e.newReclaimer(o)
	run, err := r.Reclaim(context.Background(), Request{Trigger: TriggerManual})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("detail: %s", run.Detail)
	var hang, fail *api.Action
	for i, a := range run.Actions {
		if a.Kind == api.ActionCommand && strings.Contains(a.Path, "hang.sh") {
			hang = &run.Actions[i]
		}
		if a.Kind == api.ActionCommand && strings.Contains(a.Path, "fail.sh") {
			fail = &run.Actions[i]
		}
	}
	if hang == nil || hang.Status != api.ActionFailed || !strings.Contains(hang.Error, "killed") {
		t.Errorf("hanging command: %+v", hang)
	}
	if fail == nil || fail.Status != api.ActionFailed || !strings.Contains(fail.Error, "broken store") {
		t.Errorf("failing command: %+v", fail)
	}
	if run.Verdict != api.VerdictReclaimed {
		t.Errorf("verdict %q: the ladder should have gone on to the entries", run.Verdict)
	}
	// The hung script's child (same process group) must be gone too.
	b, _ := os.ReadFile(pidFile)
	if pid := strings.TrimSpace(string(b)); pid != "" {
		deadline := time.Now().Add(time.Minute)
		for exists("/proc/"+pid) && time.Now().Before(deadline) {
			st, _ := os.ReadFile("/proc/" + pid + "/stat")
			if strings.Contains(string(st), ") Z ") {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if st, err := os.ReadFile("/proc/" + pid + "/stat"); err == nil && !strings.Contains(string(st), ") Z ") {
			t.Errorf("the hung command's child %s survived the timeout", pid)
		}
	}
}

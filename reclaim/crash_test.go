package reclaim

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

const crashEnv = "SANDBOXD_RECLAIM_CRASH_CHILD"

// crashEntries are the declared cache's entries: big directories, so deleting one takes
// long enough to be killed in the middle of it.
const crashEntries, crashSubdirs, crashFiles = 4, 40, 250

// TestCrashChild is the re-exec'd child of TestKillNineMidReclaim: it runs a reclaim and
// is SIGKILLed while deleting.
func TestCrashChild(t *testing.T) {
	spec := os.Getenv(crashEnv)
	if spec == "" {
		t.Skip("only runs as the child of TestKillNineMidReclaim")
	}
	parts := strings.Split(spec, "|")
	e := &env{t: t, root: parts[0], home: filepath.Join(parts[0], "home", "u"), stateDir: parts[1], reclaimBelow: 200 * mib, replaceBelow: 8 * mib}
	o := e.options()
	o.AutoCaches = nil
	o.Caches = []CacheConfig{{Name: "decl", Path: filepath.Join(e.root, "decl")}}
	r := e.newReclaimer(o)
	r.Reclaim(context.Background(), Request{Trigger: TriggerManual})
	t.Fatal("the child should have been killed before finishing")
}

// kill -9 in the middle of a deletion leaves no half-deleted entry at its own path: each
// entry is whole where it was, or in the trash; a new Reclaimer's next run empties the
// trash and completes; the home is untouched.
func TestKillNineMidReclaim(t *testing.T) {
	e := newEnv(t, 256*mib, 0)
	e.reclaimBelow, e.replaceBelow = 200*mib, 8*mib
	writeFile(t, filepath.Join(e.home, "project", "main.go"), 8192, time.Hour)
	decl := filepath.Join(e.root, "decl")
	for i := 0; i < crashEntries; i++ {
		for s := 0; s < crashSubdirs; s++ {
			for f := 0; f < crashFiles; f++ {
				p := filepath.Join(decl, fmt.Sprintf("pkg%d", i), fmt.Sprintf("d%02d", s), fmt.Sprintf("f%03d", f))
				if f == 0 {
					mustMkdir(t, filepath.Dir(p))
				}
				os.WriteFile(p, []byte("x"), 0o644)
			}
		}
		ageDir(filepath.Join(decl, fmt.Sprintf("pkg%d", i)), 10*time.Hour)
	}
	before := hashTree(t, e.home)

	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.v")
	cmd.Env = append(os.Environ(), crashEnv+"="+e.root+"|"+e.stateDir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && !killed {
		es, _ := os.ReadDir(decl)
		for _, de := range es {
			if isTrash(de.Name()) {
				cmd.Process.Signal(syscall.SIGKILL)
				killed = true
				break
			}
		}
	}
	err := cmd.Wait()
	if !killed {
		t.Fatalf("never saw the child deleting (child: %v)", err)
	}
	// No entry is half-deleted at its own path.
	var trash int
	es, _ := os.ReadDir(decl)
	for _, de := range es {
		if isTrash(de.Name()) {
			trash++
			continue
		}
		if n := countFiles(filepath.Join(decl, de.Name())); n != crashSubdirs*crashFiles {
			t.Errorf("entry %s was left half-deleted at its path: %d of %d files", de.Name(), n, crashSubdirs*crashFiles)
		}
	}
	if trash == 0 {
		t.Errorf("killed mid-deletion but nothing in the trash")
	}
	sameTree(t, before, hashTree(t, e.home))

	// A new Reclaimer (restart, same state dir): the next resume completes and empties
	// the trash.
	o := e.options()
	o.AutoCaches = nil
	o.Caches = []CacheConfig{{Name: "decl", Path: decl}}
	r := e.newReclaimer(o)
	run, err := r.Resume(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("detail: %s", run.Detail)
	es, _ = os.ReadDir(decl)
	for _, de := range es {
		if isTrash(de.Name()) {
			t.Errorf("trash %s left after the next resume", de.Name())
		}
	}
	if run.Verdict == api.VerdictHealthy {
		t.Errorf("verdict healthy: the test box should have needed a reclaim")
	}
	sameTree(t, before, hashTree(t, e.home))
}

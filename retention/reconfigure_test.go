package retention

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// Reconfigure adds and removes sites and changes limits without losing first sightings:
// a job kept only because its live process is the one first seen stays running.
func TestReconfigureKeepsFirstSightings(t *testing.T) {
	base := testenv.Tmpfs(t, 64<<20, 0)
	a, b := filepath.Join(base, "a"), filepath.Join(base, "b")
	os.Mkdir(a, 0o755)
	os.Mkdir(b, 0o755)
	names := makeJob(t, a, "keep", 0, time.Now())
	sleeper := exec.Command("sleep", "300")
	sleeper.Dir = "/"
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleeper.Process.Kill(); sleeper.Wait() })
	if err := os.WriteFile(filepath.Join(a, "keep.pid"), []byte(strconv.Itoa(sleeper.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	h := run(t, Options{Sites: []SiteConfig{siteCfg("a", a)}})
	waitFor(t, "the job first seen", func() bool { s, _ := h.m.Site("a"); return s.RunningJobs == 1 })
	ageAll(t, a, names, time.Now().Add(-13*time.Hour))
	ca := siteCfg("a", a)
	ca.MaxFiles = 1
	if err := h.m.Reconfigure([]SiteConfig{ca, siteCfg("b", b)}); err != nil {
		t.Fatal(err)
	}
	if got := h.m.SiteNames(); len(got) != 2 || got[1] != "b" {
		t.Fatalf("sites %v after reconfigure", got)
	}
	waitFor(t, "site b scanned", func() bool { s, _ := h.m.Site("b"); return s.Problem == nil })
	time.Sleep(300 * time.Millisecond) // several liveness rounds and drain kicks
	pruneNow(t, h.m, "a")
	for _, n := range names {
		if !exists(a, n) {
			t.Fatalf("%s pruned after a reconfigure: the first sighting was lost", n)
		}
	}
	if err := h.m.Reconfigure([]SiteConfig{siteCfg("b", b)}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.m.Site("a"); !errors.Is(err, ErrUnknownSite) {
		t.Fatalf("removed site answers %v, want ErrUnknownSite", err)
	}
}

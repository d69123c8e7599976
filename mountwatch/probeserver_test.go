package mountwatch

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/fusetest"
)

// probeServerPids are this process's live children running `mount-probe --serve`.
func probeServerPids() []int {
	var out []int
	me := strconv.Itoa(os.Getpid())
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		cmd, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "cmdline"))
		if len(f) > 1 && f[1] == me && strings.Contains(string(cmd), "--serve") {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			out = append(out, pid)
		}
	}
	return out
}

// One probe server answers every probe of an owner: over many rounds there is one, not a
// process per probe; when it dies, the next probe starts another and the mount stays healthy.
func TestProbeServerLivesAndIsReplaced(t *testing.T) {
	f := newFixture(t)
	f.startServer(fusetest.Options{})
	f.run(f.opts(f.mountCfg("agent")))
	f.waitState("agent", api.MountHealthy)
	var pids []int
	f.waitFor("one probe server", func() bool { pids = probeServerPids(); return len(pids) == 1 })
	first := f.mountState("agent").LastProbeAt
	f.waitFor("ten more rounds", func() bool {
		return time.Since(*first) > 0 && f.mountState("agent").LastProbeAt.Sub(*first) > time.Second
	})
	if now := probeServerPids(); len(now) != 1 || now[0] != pids[0] {
		t.Fatalf("probe servers %v after many rounds, want the one %v", now, pids)
	}
	syscall.Kill(pids[0], syscall.SIGKILL)
	f.waitFor("a new probe server", func() bool { now := probeServerPids(); return len(now) == 1 && now[0] != pids[0] })
	at := time.Now()
	f.waitFor("a healthy round after the restart", func() bool {
		m := f.mountState("agent")
		return m.State == api.MountHealthy && m.LastProbeAt.After(at)
	})
	if ev := f.eventsWith(api.EventMountProbe, "is "); len(ev) != 1 {
		t.Errorf("the mount changed state when its probe server died: %+v", ev)
	}
}

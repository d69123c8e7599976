package daemon

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// TestPlantedPidFileCannotAimTheCleanup (issue 21 item 2): uid 65534 can write a site
// (mode 1777, as a shared /tmp site is) and plants evil.pid naming a root process, dated
// two hours back. The leak check reports it, but --clean (asked by 65534, a writer) leaves
// it running and says why; root's process and its child survive. 65534's own process,
// named by its own file, is still ended.
func TestPlantedPidFileCannotAimTheCleanup(t *testing.T) {
	root := testenv.CgroupRoot(t)
	_, site, body := siteOnTmpfs(t, 16<<20, 0, fmt.Sprintf("[jobs]\ncgroup_root = %q\ngrace = \"500ms\"\nunleased_max = \"1m\"\n", root))
	os.Chmod(site, 0o777|os.ModeSticky)
	td := startDaemon(t, body)
	td.d.cfgMu.Lock()
	td.d.writersV = Writers{UIDs: []uint32{attacker}}
	td.d.cfgMu.Unlock()

	victim := jobSleeper(t) // root's "service"
	evil := filepath.Join(site, "evil.pid")
	asNobody(t, "sh", "-c", fmt.Sprintf("echo %d > %s && touch -d '2 hours ago' %s", victim.Process.Pid, evil, evil))
	// 65534's own leaked process, named by its own file, as old.
	ownPid := filepath.Join(site, "own.pid")
	asNobody(t, "sh", "-c", fmt.Sprintf("sleep 600 >/dev/null 2>&1 & echo $! > %s; touch -d '2 hours ago' %s", ownPid, ownPid))
	b, _ := os.ReadFile(ownPid)
	own, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	t.Cleanup(func() { killPid(own) })

	var rep api.LeaksReport
	poll(t, time.Minute, "the leak check to see both pid files", func() bool {
		td.client.Launch(t.Context(), api.LaunchRequest{Site: "aura-bg"}) // a scan of the site
		code, answer := requestAs(t, td, attacker, attacker, nil, "GET", "/v1/jobs/leaks", "")
		rep = api.LeaksReport{}
		json.Unmarshal([]byte(answer), &rep)
		return code == 200 && len(rep.Leaks) == 2
	})
	code, answer := requestAs(t, td, attacker, attacker, nil, "GET", "/v1/jobs/leaks?clean=true", "")
	rep = api.LeaksReport{}
	if err := json.Unmarshal([]byte(answer), &rep); code != 200 || err != nil {
		t.Fatalf("leaks?clean=true as uid %d: %d %s", attacker, code, answer)
	}
	for _, l := range rep.Leaks {
		switch l.PID {
		case victim.Process.Pid:
			if l.Cleaned || !strings.Contains(l.Error, "left running") || !strings.Contains(l.Error, "uid 65534") {
				t.Errorf("planted leak: %+v, want it reported and left running, naming the file's owner", l)
			}
			if l.AgeSeconds < 3600 {
				t.Errorf("planted leak aged %.0fs, want the file's age (2h), not the process's", l.AgeSeconds)
			}
		case own:
			if !l.Cleaned {
				t.Errorf("65534's own leak: %+v, want it ended", l)
			}
		default:
			t.Errorf("unexpected leak %+v", l)
		}
	}
	if !procAlive(victim.Process.Pid) {
		t.Fatal("root's process named by a planted pid file was ended")
	}
	poll(t, time.Minute, "65534's own process to end", func() bool { return !procAlive(own) })
	if ev := td.eventsWith(t, api.EventKill, "left running"); len(ev) != 1 {
		t.Errorf("%d kill events say \"left running\", want 1", len(ev))
	}
}

func killPid(pid int) {
	if pid > 1 {
		if p, err := os.FindProcess(pid); err == nil {
			p.Kill()
		}
	}
}

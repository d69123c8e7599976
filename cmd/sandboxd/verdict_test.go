package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/testenv"
	"golang.org/x/sys/unix"
)

// One verdict for one disk (issue 23 item 1): a table walks a filesystem through its
// states, and at each one launch, resume, a dry run, check, health, status and metrics
// all say the verdict api.Filesystem.Judge gives — at 55 MiB free they said "ok …
// (verdict replace)", "low" and CRITICAL ReplaceRecommended.
func TestOneVerdictEverywhere(t *testing.T) {
	testenv.RequireRoot(t)
	mnt := testenv.Tmpfs(t, 32<<20, 0)
	dir := t.TempDir()
	cfg := fmt.Sprintf(`site = []
[[filesystem]]
path = %q
reclaim_below = "8MiB"
replace_below = "4MiB"
reserve = "0"
warn_time_to_full = "0s"
`, mnt)
	_, sock, logs := serveDaemon(t, dir, cfg, `transition_period = "0s"`)
	s := "--socket=" + sock
	hc := &http.Client{Transport: &http.Transport{DialContext: client.DialUnix(sock)}, Timeout: 5 * time.Second}
	defer hc.CloseIdleConnections()
	get := func(path string) string {
		resp, err := hc.Get("http://sandboxd" + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	fillTo := func(name string, free uint64) {
		var st unix.Statfs_t
		unix.Statfs(mnt, &st)
		avail := st.Bavail * uint64(st.Frsize)
		if avail > free {
			testenv.Fill(filepath.Join(mnt, name), int64(avail-free))
		}
	}
	states := []struct {
		name    string
		set     func()
		verdict string
		check   int    // the Nagios status check exits with
		health  string // /v1/health's status
	}{
		{"roomy", func() {}, api.VerdictOK, 0, api.HealthOK},
		{"below reclaim_below, nothing reclaimable", func() { fillTo("a", 6<<20) }, api.VerdictLow, 1, api.HealthWarning},
		{"below replace_below", func() { fillTo("b", 2<<20) }, api.VerdictReplace, 2, api.HealthCritical},
		{"the writer cleaned up", func() { os.Remove(filepath.Join(mnt, "a")); os.Remove(filepath.Join(mnt, "b")) }, api.VerdictOK, 0, api.HealthOK},
	}
	for _, st := range states {
		st.set()
		var status api.Status
		testenv.Eventually(t, time.Minute, st.name+": status to show verdict "+st.verdict, func() bool {
			status = api.Status{}
			r := sandboxd(t, nil, "status", s, "--json")
			return json.Unmarshal([]byte(r.stdout), &status) == nil && len(status.Filesystems) == 1 && status.Filesystems[0].Verdict == st.verdict
		})
		says := map[string]string{}
		r := sandboxd(t, nil, "status", s)
		if strings.Contains(r.stdout, "verdict "+st.verdict) {
			says["status"] = st.verdict
		}
		var lr api.LaunchResponse
		r = sandboxd(t, nil, "launch", s, "--need-bytes", "1KiB", "--json")
		json.Unmarshal([]byte(r.stdout), &lr)
		says["launch"] = lr.Verdict
		if (lr.Advice != nil && *lr.Advice == "replace") != (st.verdict == api.VerdictReplace) {
			t.Errorf("%s: launch advice %v with verdict %s: %s", st.name, lr.Advice, lr.Verdict, lr.Detail)
		}
		for _, args := range [][]string{{"resume"}, {"reclaim", "--dry-run"}} {
			var run api.ReclaimRun
			r = sandboxd(t, nil, append(args, s, "--json")...)
			json.Unmarshal([]byte(r.stdout), &run)
			v := run.Verdict
			if api.RunVerdictOK(v) {
				v = api.VerdictOK
			}
			says[args[0]] = v
			if len(run.After) == 1 && run.After[0].Verdict != v {
				says[args[0]+" after"] = run.After[0].Verdict
			}
		}
		r = sandboxd(t, nil, "check", s)
		if r.code == st.check && strings.Contains(r.stdout, "(verdict "+st.verdict+")") {
			says["check"] = st.verdict
		} else {
			says["check"] = fmt.Sprintf("exit %d: %s", r.code, r.stdout)
		}
		var h api.Health
		json.Unmarshal([]byte(get("/v1/health")), &h)
		if h.Status == st.health {
			says["health"] = st.verdict
		} else {
			says["health"] = h.Status + ": " + h.Summary
		}
		if strings.Contains(get("/metrics"), `verdict="`+st.verdict+`"} 1`) {
			says["metrics"] = st.verdict
		}
		for _, who := range []string{"status", "launch", "resume", "reclaim", "check", "health", "metrics"} {
			if says[who] != st.verdict {
				t.Errorf("%s: %s says %q, the verdict is %q", st.name, who, says[who], st.verdict)
			}
		}
		for who, v := range says {
			if strings.HasSuffix(who, " after") {
				t.Errorf("%s: %s figures say %q", st.name, who, v)
			}
		}
	}
	if t.Failed() {
		t.Logf("daemon log:\n%s", logs.String())
	}
}

package daemon

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
	"github.com/sandboxd/sandboxd/internal/testenv"
)

func resumeRun(t *testing.T, td *testDaemon, body string) (int, api.ReclaimRun, api.Problem, string) {
	t.Helper()
	status, _, raw := td.do(t, "POST", "/v1/resume", body)
	var run api.ReclaimRun
	var p api.Problem
	if status == 200 {
		json.Unmarshal([]byte(raw), &run)
	} else {
		json.Unmarshal([]byte(raw), &p)
	}
	return status, run, p, raw
}

// TestResumeNeverServesAStaleHealthy: a healthy resume, then the disk filled to 98%, then
// a resume at once must say what is on disk now, not the healthy answer of a moment ago;
// a resume whose deadline passed before anything was measured is busy (503, Retry-After),
// never healthy, and is not served to the next caller (issue 10, items 4 and 7).
func TestResumeNeverServesAStaleHealthy(t *testing.T) {
	mnt := testenv.Tmpfs(t, 64<<20, 0)
	body := fmt.Sprintf(`site = []
[[filesystem]]
path = %q
reclaim_below = "8MiB"
replace_below = "2MiB"
reserve = "0"
`, mnt)
	td := startDaemon(t, body)
	for i := 0; i < 2; i++ {
		status, run, p, _ := resumeRun(t, td, `{}`)
		if status != 200 || run.Verdict != api.VerdictHealthy || run.Cached {
			t.Fatalf("healthy resume %d: %d verdict %q cached %v %s", i+1, status, run.Verdict, run.Cached, p.Detail)
		}
	}
	if err := testenv.Fill(filepath.Join(mnt, "userdata"), 63<<20); err != nil {
		t.Fatal(err)
	}
	status, run, p, _ := resumeRun(t, td, `{}`)
	if status != 200 || run.Verdict == api.VerdictHealthy || run.Cached {
		t.Fatalf("resume on a full disk right after a healthy one: %d verdict %q cached %v: %s%s", status, run.Verdict, run.Cached, run.Detail, p.Detail)
	}
	if len(run.After) != 1 || run.After[0].AvailBytes > 2<<20 || !strings.Contains(run.Detail, "free of 64.0 MiB") {
		t.Fatalf("the answer does not show the full disk: %+v: %s", run.After, run.Detail)
	}
	// The same state a moment later may be the cached replace: it agrees with the samples.
	if status, again, _, _ := resumeRun(t, td, `{}`); status != 200 || again.Verdict != api.VerdictReplace {
		t.Fatalf("second resume on the full disk: %d %q", status, again.Verdict)
	}
	os.Remove(filepath.Join(mnt, "userdata"))
	if status, run, _, _ := resumeRun(t, td, `{}`); status != 200 || run.Verdict != api.VerdictHealthy || run.Cached {
		t.Fatalf("room back: %d verdict %q cached %v: %s", status, run.Verdict, run.Cached, run.Detail)
	}

	busy := 0
	for i := 0; i < 20; i++ {
		status, _, raw := td.do(t, "POST", "/v1/resume", `{"deadline":"1ns"}`)
		if status == 503 {
			busy++
		}
		var run api.ReclaimRun
		json.Unmarshal([]byte(raw), &run)
		switch {
		case status == 200 && len(run.After) == 1 && !run.Cached:
			// measured in time: a real verdict
		case status == 503 && strings.Contains(raw, `"busy"`) && strings.Contains(raw, "deadline"):
		default:
			t.Fatalf("resume with a 1ns deadline: %d %s", status, raw)
		}
		if run.Verdict == api.VerdictHealthy && len(run.After) == 0 {
			t.Fatalf("a healthy that measured nothing: %s", raw)
		}
	}
	if busy == 0 {
		t.Error("no resume of 20 with a 1ns deadline reached the deadline")
	}
	req, _ := http.NewRequest("POST", "http://sandboxd/v1/resume", strings.NewReader(`{"deadline":"1ns"}`))
	if resp, err := td.http.Do(req); err == nil {
		if resp.StatusCode == 503 && resp.Header.Get("Retry-After") == "" {
			t.Error("busy without Retry-After")
		}
		resp.Body.Close()
	}
}

// TestLaunchDeadlineIsNeverInternal: a launch whose deadline passes before statfs answers
// is busy (503, Retry-After) or the measured answer, never 500 internal (issue 10, item 7).
func TestLaunchDeadlineIsNeverInternal(t *testing.T) {
	_, _, body := siteOnTmpfs(t, 16<<20, 0, "")
	td := startDaemon(t, body)
	busy := 0
	for i := 0; i < 50; i++ {
		status, _, raw := td.do(t, "POST", "/v1/launch", `{"deadline":"1ns"}`)
		if status == 503 {
			busy++
		}
		if status == 500 || strings.Contains(raw, `"internal"`) {
			t.Fatalf("launch with a 1ns deadline: %d %s", status, raw)
		}
		if status != 200 && !(status == 503 && strings.Contains(raw, "deadline")) {
			t.Fatalf("launch with a 1ns deadline: %d %s", status, raw)
		}
	}
	if busy == 0 {
		t.Error("no launch of 50 with a 1ns deadline reached the deadline")
	}
}

// TestCutShortByStopIsNotADeadline: a call whose statfs the daemon's own stop cut short
// (the stop grace ended with the call still waiting: calls in flight at SIGTERM otherwise
// finish, TestStopLetsTheCallsInFlightFinish) is told that sandboxd is stopping and that a
// retry reaches the next daemon; while the daemon runs, the same refusal names the call's
// deadline. Both stay busy (503, Retry-After) with the disk's last figures.
// TestStopCutsShortACallThatCannotFinish sees the same through a real hung statfs.
func TestCutShortByStopIsNotADeadline(t *testing.T) {
	_, _, body := siteOnTmpfs(t, 16<<20, 0, "")
	td := startDaemon(t, body)
	fs := firstFS(td.d.current().pressure.Snapshot())
	running := td.d.deadlineProblem(fs, 2*time.Second, nil)
	td.stop()
	stopping := td.d.deadlineProblem(fs, 2*time.Second, nil)
	for _, p := range []*api.Problem{running, stopping} {
		if p.Code != api.CodeBusy || p.RetryAfterSeconds != 1 || !strings.Contains(p.Detail, "(last sample)") {
			t.Errorf("want busy with Retry-After 1 and the last sample: %+v", p)
		}
	}
	if !strings.Contains(running.Detail, "the call's deadline (2s) passed") || strings.Contains(running.Detail, "stopping") {
		t.Errorf("while the daemon runs: %q", running.Detail)
	}
	if !strings.Contains(stopping.Detail, "sandboxd is stopping") || strings.Contains(stopping.Detail, "deadline (2s)") {
		t.Errorf("once the daemon stopped: %q", stopping.Detail)
	}
}

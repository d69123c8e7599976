package daemon

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// TestKnobBoundsAndQuotas (issue 21 item 6), with uid 65534 as the writer: a 1ns or 99ms
// probe_interval is refused; a ttl or extend of 2562047h is clamped to the job's
// max_lifetime and the job runs on (the overflow ended it at once); one uid stops at its
// per-uid caps while root still registers; the global mount cap is exact under 200
// concurrent registrations; 65534's required mount on an empty directory fails only the
// launches that name it; GET /v1/jobs comes in pages.
func TestKnobBoundsAndQuotas(t *testing.T) {
	root := testenv.CgroupRoot(t)
	dir, err := os.MkdirTemp("", "sandboxd-bounds-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	body := noSites(dir) + fmt.Sprintf("[jobs]\ncgroup_root = %q\ngrace = \"500ms\"\nmax_lifetime = \"1h\"\nmax_per_uid = 2\n[mounts]\nmax_registered = 50\nmax_registered_per_uid = 2\n", root)
	td := startDaemon(t, body)
	td.d.cfgMu.Lock()
	td.d.writersV = Writers{UIDs: []uint32{attacker}}
	td.d.cfgMu.Unlock()
	ownDir := func(name string) string {
		p := filepath.Join(dir, name)
		os.Mkdir(p, 0o755)
		os.Chown(p, attacker, attacker)
		return p
	}

	// Intervals.
	for _, iv := range []string{"1ns", "99ms", "1000000h"} {
		reg := fmt.Sprintf(`{"name": "fast", "path": %q, "probe_interval": %q}`, ownDir("fast"), iv)
		if code, answer := requestAs(t, td, attacker, attacker, nil, "POST", "/v1/mounts", reg); code != 400 || !strings.Contains(answer, "from 100ms") {
			t.Errorf("probe_interval %s: %d %s; want 400", iv, code, answer)
		}
	}

	// ttl and extend past max_lifetime.
	p := nobodySleeper(t, attacker)
	code, answer := requestAs(t, td, attacker, attacker, nil, "POST", "/v1/jobs", fmt.Sprintf(`{"id": "long", "pid": %d, "ttl": "2562047h"}`, p.Process.Pid))
	var j api.Job
	json.Unmarshal([]byte(answer), &j)
	if code != 201 || j.LeaseExpiresAt.After(j.DeadlineAt) || !strings.Contains(answer, "clamped") {
		t.Fatalf("ttl 2562047h: %d %s; want 201 with the lease clamped to the deadline", code, answer)
	}
	code, answer = requestAs(t, td, attacker, attacker, nil, "POST", "/v1/jobs/long/heartbeat", `{"extend": "2562047h"}`)
	var hb api.HeartbeatAnswer
	json.Unmarshal([]byte(answer), &hb)
	if code != 200 || !hb.Job.LeaseExpiresAt.Equal(hb.Job.DeadlineAt) || hb.Job.State != api.JobRunning {
		t.Fatalf("extend 2562047h: %d %s; want the lease at the deadline, running", code, answer)
	}
	if j, _ := td.client.Job(t.Context(), "long"); j.State != api.JobRunning || !procAlive(p.Process.Pid) {
		t.Fatalf("the job after a huge ttl and extend: %+v", j)
	}

	// Per-uid caps: a second job fits, a third does not; root's still does.
	p2, p3 := nobodySleeper(t, attacker), nobodySleeper(t, attacker)
	if code, answer := requestAs(t, td, attacker, attacker, nil, "POST", "/v1/jobs", fmt.Sprintf(`{"pid": %d}`, p2.Process.Pid)); code != 201 {
		t.Fatalf("65534's second job: %d %s", code, answer)
	}
	if code, answer := requestAs(t, td, attacker, attacker, nil, "POST", "/v1/jobs", fmt.Sprintf(`{"pid": %d}`, p3.Process.Pid)); code != 503 || !strings.Contains(answer, "max_per_uid") {
		t.Errorf("65534's third job: %d %s; want 503 naming max_per_uid", code, answer)
	}
	if _, err := td.client.RegisterJob(t.Context(), api.JobRequest{PID: jobSleeper(t).Process.Pid}); err != nil {
		t.Errorf("root's job beside 65534's full quota: %v", err)
	}
	for i := range 3 {
		reg := fmt.Sprintf(`{"name": "q%d", "path": %q}`, i, ownDir(fmt.Sprintf("q%d", i)))
		code, answer := requestAs(t, td, attacker, attacker, nil, "POST", "/v1/mounts", reg)
		if want := map[bool]int{true: 201, false: 409}[i < 2]; code != want {
			t.Errorf("65534's mount %d: %d %s; want %d", i, code, answer, want)
		}
	}

	// The global cap, exact under concurrency: 48 more fit (2 are 65534's).
	var ok atomic.Int64
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			path := filepath.Join(dir, fmt.Sprintf("c%d", i))
			os.Mkdir(path, 0o755)
			if _, err := td.client.RegisterMount(t.Context(), api.MountRegistration{Name: fmt.Sprintf("c%d", i), Path: path}); err == nil {
				ok.Add(1)
			} else if jobProblem(err) != api.CodeConflict {
				t.Errorf("concurrent registration %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	if got := td.d.current().mounts.CountRegistered(); ok.Load() != 48 || got != 50 {
		t.Errorf("%d of 200 concurrent registrations accepted, %d registered; want 48 and the cap of 50", ok.Load(), got)
	}

	// 65534's required mount (q0, on an empty directory, so missing) gates only launches naming it.
	for i := range 200 {
		td.client.ReleaseMount(t.Context(), fmt.Sprintf("c%d", i), nil)
	}
	reg := fmt.Sprintf(`{"name": "req", "path": %q, "required": true, "probe_interval": "100ms"}`, ownDir("req"))
	requestAs(t, td, attacker, attacker, nil, "DELETE", "/v1/mounts/q1", "")
	if code, answer := requestAs(t, td, attacker, attacker, nil, "POST", "/v1/mounts", reg); code != 201 || !strings.Contains(answer, "gates only the launches that name it") {
		t.Fatalf("65534's required mount: %d %s", code, answer)
	}
	poll(t, time.Minute, "the required mount probed missing", func() bool { return td.mount(t, "req").State == api.MountMissing })
	if code, p := launchMounts(t, td); code != 200 {
		t.Errorf("a launch naming no mount failed on 65534's required mount: %d %s", code, p.Detail)
	}
	if code, _ := launchMounts(t, td, "req"); code == 200 {
		t.Error("a launch naming 65534's missing mount passed")
	}
	if h := td.status(t); strings.Contains(fmt.Sprint(h.Conditions), "critical") {
		t.Errorf("65534's mount made a critical condition: %+v", h.Conditions)
	}

	// Pages of GET /v1/jobs: 3 jobs, 2 per page.
	var page api.JobsPage
	_, _, b := td.do(t, "GET", "/v1/jobs?limit=2", "")
	json.Unmarshal([]byte(b), &page)
	if len(page.Jobs) != 2 || page.Next == "" {
		t.Fatalf("first page: %s", b)
	}
	seen := map[string]bool{}
	for _, j := range page.Jobs {
		seen[j.ID] = true
	}
	_, _, b = td.do(t, "GET", "/v1/jobs?limit=2&after="+page.Next, "")
	page = api.JobsPage{}
	json.Unmarshal([]byte(b), &page)
	for _, j := range page.Jobs {
		seen[j.ID] = true
	}
	if len(page.Jobs) != 1 || page.Next != "" || len(seen) != 3 {
		t.Errorf("second page: %s (seen %v)", b, seen)
	}
	if all, err := td.client.Jobs(t.Context()); err != nil || len(all.Jobs) != 3 {
		t.Errorf("client.Jobs across pages: %v %v", all, err)
	}
	for _, q := range []string{"limit=0", "limit=1001", "limit=x", "after=nonsense"} {
		if code, _, b := td.do(t, "GET", "/v1/jobs?"+q, ""); code != 400 {
			t.Errorf("GET /v1/jobs?%s: %d %s; want 400", q, code, b)
		}
	}
}

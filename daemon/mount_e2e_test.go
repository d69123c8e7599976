package daemon

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/fusetest"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// End-to-end proofs of issue 5 through a real daemon: a [[mount]] served by a test FUSE
// server (internal/fusetest) in a child process, probed by the daemon's probe children,
// observed only through the API.

// mountSpec is one [[mount]] entry of a test config.
type mountSpec struct {
	name, path        string
	interval, timeout time.Duration
	remount, refresh  []string
	cred              string
	refreshAt         float64
	maxRemounts       int
	canary            bool
}

func tomlArgv(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = fmt.Sprintf("%q", a)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

func (m mountSpec) toml() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n[[mount]]\nname = %q\npath = %q\nrequired = true\ncanary = %v\n", m.name, m.path, m.canary)
	fmt.Fprintf(&b, "probe_interval = %q\nprobe_timeout = %q\n", m.interval.String(), m.timeout.String())
	if len(m.remount) > 0 {
		fmt.Fprintf(&b, "remount_command = %s\n", tomlArgv(m.remount))
	}
	if m.cred != "" {
		fmt.Fprintf(&b, "credential_file = %q\n", m.cred)
	}
	if len(m.refresh) > 0 {
		fmt.Fprintf(&b, "refresh_command = %s\n", tomlArgv(m.refresh))
	}
	if m.refreshAt > 0 {
		fmt.Fprintf(&b, "refresh_at = %v\n", m.refreshAt)
	}
	if m.maxRemounts > 0 {
		fmt.Fprintf(&b, "max_remounts_per_hour = %d\n", m.maxRemounts)
	}
	return b.String()
}

// probeSelf points the daemon's probe children at this test binary (TestMain serves
// "mount-probe"), as the real daemon re-execs its own binary.
func probeSelf(o *Options) {
	exe, err := os.Executable()
	if err == nil {
		o.ProbeCommand = []string{exe, "mount-probe"}
	}
}

// mountDir makes a mountpoint in a fresh temp dir; the fusetest server made afterwards
// detaches everything on it before the dir is removed.
func mountDir(t testing.TB, name string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// startMountDaemon runs a daemon watching the given mounts, probing through this binary.
func startMountDaemon(t testing.TB, mounts ...mountSpec) *testDaemon {
	t.Helper()
	body := noSites(t.TempDir())
	for _, m := range mounts {
		body += m.toml()
	}
	td := startDaemon(t, body, probeSelf)
	logEventsOnFailure(t, td)
	return td
}

// startTiedMountDaemon is startMountDaemon with registered mounts tied to the jobs of
// tie, wired before Run starts (wired after, it raced with Run's start-up release).
func startTiedMountDaemon(t testing.TB, tie jobTie) *testDaemon {
	t.Helper()
	td := startDaemon(t, noSites(t.TempDir()), probeSelf, withJobs(tie))
	logEventsOnFailure(t, td)
	return td
}

// logEventsOnFailure logs the daemon's events when t fails.
func logEventsOnFailure(t testing.TB, td *testDaemon) {
	t.Cleanup(func() {
		if t.Failed() {
			for _, e := range td.events(t) {
				t.Logf("event %s %s %s: %s", e.Time.Format("15:04:05.000"), e.Kind, e.Subject, e.Message)
			}
		}
	})
}

func (td *testDaemon) status(t testing.TB) api.Status {
	t.Helper()
	code, _, body := td.do(t, "GET", "/v1/status", "")
	var s api.Status
	if code != 200 || json.Unmarshal([]byte(body), &s) != nil {
		t.Fatalf("status: %d %s", code, body)
	}
	return s
}

func (td *testDaemon) mount(t testing.TB, name string) api.Mount {
	t.Helper()
	for _, m := range td.status(t).Mounts {
		if m.Name == name {
			return m
		}
	}
	t.Fatalf("mount %s not in /v1/status", name)
	return api.Mount{}
}

// events answers the daemon's whole audit trail.
func (td *testDaemon) events(t testing.TB) []api.Event {
	t.Helper()
	code, _, body := td.do(t, "GET", "/v1/events?since=0", "")
	var p api.EventsPage
	if code != 200 || json.Unmarshal([]byte(body), &p) != nil {
		t.Fatalf("events: %d %s", code, body)
	}
	return p.Events
}

// eventsWith are the events of kind ("" any) whose message contains substr.
func (td *testDaemon) eventsWith(t testing.TB, kind, substr string) []api.Event {
	t.Helper()
	var out []api.Event
	for _, e := range td.events(t) {
		if (kind == "" || e.Kind == kind) && strings.Contains(e.Message, substr) {
			out = append(out, e)
		}
	}
	return out
}

func (td *testDaemon) waitMountState(t testing.TB, name, state string) api.Mount {
	t.Helper()
	var m api.Mount
	poll(t, time.Minute, "mount "+name+" "+state, func() bool {
		m = td.mount(t, name)
		return m.State == state && m.LastProbeAt != nil
	})
	return m
}

// launchMounts calls launch naming the mounts and answers status and problem.
func launchMounts(t testing.TB, td *testDaemon, names ...string) (int, api.Problem) {
	t.Helper()
	b, _ := json.Marshal(api.LaunchRequest{Mounts: names})
	code, _, body := td.do(t, "POST", "/v1/launch", string(b))
	var p api.Problem
	if code != 200 {
		json.Unmarshal([]byte(body), &p)
	}
	return code, p
}

// gated wraps argv so that it fails until the file gate exists: a remount that cannot
// succeed yet keeps the mount down long enough to look at it.
func gated(gate string, argv []string) []string {
	script := fmt.Sprintf(`test -e '%s' || { echo "gate closed"; exit 1; }; exec "$@"`, gate)
	return append([]string{"/bin/sh", "-c", script, "sh"}, argv...)
}

// TestMountRefreshKeepsLaunchOpen (issue 5 a): with a refresh_command that renews the
// credential before it expires, the mount is never denied and every launch naming it
// passes; status shows the credential's fresh expiry and the events the refreshes. (An
// 8 s credential refreshed at half its life: 4 s in which a loaded machine must start the
// daemon, and then run each refresh, before the server denies.)
func TestMountRefreshKeepsLaunchOpen(t *testing.T) {
	testenv.RequireRoot(t)
	mnt := mountDir(t, "agent")
	cred := filepath.Join(t.TempDir(), "cred.json")
	if err := fusetest.WriteCred(cred, time.Now().Add(8*time.Second)); err != nil {
		t.Fatal(err)
	}
	fusetest.Start(t, mnt, fusetest.Options{Credential: cred, Reload: true})
	td := startMountDaemon(t, mountSpec{name: "agent", path: mnt, interval: 200 * time.Millisecond, timeout: 2 * time.Second,
		canary: true, cred: cred, refresh: fusetest.RefreshCommand(cred, 8*time.Second), refreshAt: 0.5})
	td.waitMountState(t, "agent", api.MountHealthy)
	refused := 0
	poll(t, time.Minute, "three credential refreshes", func() bool {
		if code, p := launchMounts(t, td, "agent"); code != 200 {
			refused++
			t.Logf("launch refused: %d %s %s", code, p.Code, p.Detail)
		}
		return len(td.eventsWith(t, api.EventCredential, "credentials refreshed")) >= 3
	})
	if refused > 0 {
		t.Errorf("%d launch calls refused while the credential was being refreshed", refused)
	}
	if ev := td.eventsWith(t, api.EventMountProbe, "denied"); len(ev) > 0 {
		t.Fatalf("the mount went denied despite the refresh: %s", ev[0].Message)
	}
	m := td.mount(t, "agent")
	if m.State != api.MountHealthy || m.CredentialExpiresAt == nil || m.RemountsTotal != 0 {
		t.Fatalf("mount after the refreshes: %+v", m)
	}
	// The mount series carry required, so only required mounts page (the alert rules).
	_, _, body := td.do(t, "GET", "/metrics", "")
	for _, re := range []string{
		`(?m)^sandboxd_mount_healthy\{fstype="[^"]*",mount="agent",mountpoint="` + regexp.QuoteMeta(mnt) + `",required="true"\} 1$`,
		`(?m)^sandboxd_mount_credential_expiry_timestamp_seconds\{mount="agent",required="true"\} \S+$`,
	} {
		if !regexp.MustCompile(re).MatchString(body) {
			t.Errorf("/metrics has no line matching %s", re)
		}
	}
}

// TestMountStaticCredentialsRemounted (issue 5 b): static keys expire, the mount answers
// EACCES (its root stat still works), the daemon sees denied and remount_command restarts
// the server with fresh keys; healthy again, and status and events say what happened.
func TestMountStaticCredentialsRemounted(t *testing.T) {
	testenv.RequireRoot(t)
	mnt := mountDir(t, "agent")
	cred := filepath.Join(t.TempDir(), "cred.json")
	if err := fusetest.WriteCred(cred, time.Now().Add(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	srv := fusetest.Start(t, mnt, fusetest.Options{Credential: cred})
	td := startMountDaemon(t, mountSpec{name: "agent", path: mnt, interval: 200 * time.Millisecond, timeout: 2 * time.Second,
		canary: true, cred: cred, remount: srv.RemountCommand(time.Hour), maxRemounts: 20})
	td.waitMountState(t, "agent", api.MountHealthy)
	poll(t, time.Minute, "a denied event", func() bool {
		return len(td.eventsWith(t, api.EventMountProbe, "is denied: EACCES")) > 0
	})
	var m api.Mount
	poll(t, time.Minute, "healthy after a remount", func() bool {
		m = td.mount(t, "agent")
		return m.State == api.MountHealthy && m.RemountsTotal >= 1
	})
	waitRemountEvent(t, td, m)
	if m.CredentialExpiresAt == nil || time.Until(*m.CredentialExpiresAt) < 30*time.Minute {
		t.Fatalf("credential_expires_at = %v, want the renewed expiry", m.CredentialExpiresAt)
	}
	if code, p := launchMounts(t, td, "agent"); code != 200 {
		t.Fatalf("launch after the remount: %d %s", code, p.Detail)
	}
}

// TestMountKilledServerRemounted (issue 5 c): the FUSE server dies, the daemon sees
// disconnected (ENOTCONN), refuses launch naming the mount, state, errno and since, and
// the remount brings it back.
func TestMountKilledServerRemounted(t *testing.T) {
	testenv.RequireRoot(t)
	mnt := mountDir(t, "agent")
	gate := filepath.Join(t.TempDir(), "gate")
	srv := fusetest.Start(t, mnt, fusetest.Options{})
	td := startMountDaemon(t, mountSpec{name: "agent", path: mnt, interval: 200 * time.Millisecond, timeout: 2 * time.Second,
		canary: true, remount: gated(gate, srv.StartCommand()), maxRemounts: 30})
	td.waitMountState(t, "agent", api.MountHealthy)
	srv.Kill()
	poll(t, time.Minute, "a disconnected event", func() bool {
		return len(td.eventsWith(t, api.EventMountProbe, "is disconnected: ENOTCONN")) > 0
	})
	checkRefusal(t, td, "agent", mnt, api.MountDisconnected)
	os.WriteFile(gate, nil, 0o644)
	m := td.waitMountState(t, "agent", api.MountHealthy)
	waitRemountEvent(t, td, m)
	if code, p := launchMounts(t, td, "agent"); code != 200 {
		t.Fatalf("launch after the remount: %d %s", code, p.Detail)
	}
}

// waitRemountEvent checks the mount counts a remount and waits for the remount's event,
// which follows the healthy verdict by a moment.
func waitRemountEvent(t *testing.T, td *testDaemon, m api.Mount) {
	t.Helper()
	if m.RemountsTotal < 1 {
		t.Fatalf("healthy without a remount? %+v", m)
	}
	poll(t, time.Minute, "the remount event", func() bool {
		return len(td.eventsWith(t, api.EventRemount, "remounted agent")) > 0
	})
}

// downDetail matches a refusal detail: the mount, its path, a down state, since when and
// an errno.
var downDetail = regexp.MustCompile(`mount (\S+) \((\S+)\) is (hung|disconnected|denied|missing) since (\S+): (E[A-Z]+)`)

// checkRefusal waits until launch is refused with mount_unavailable and a detail naming
// the mount, state, since when and the errno, and checks health is critical then.
func checkRefusal(t *testing.T, td *testDaemon, name, path, state string) {
	t.Helper()
	var p api.Problem
	var code int
	seen := map[string]bool{}
	poll(t, time.Minute, "a refusal naming the errno", func() bool {
		code, p = launchMounts(t, td, name)
		if key := fmt.Sprint(code, p.Detail); !seen[key] && len(seen) < 20 {
			seen[key] = true
			t.Logf("launch while down: %d %s", code, p.Detail)
		}
		sm := downDetail.FindStringSubmatch(p.Detail)
		return code != 200 && sm != nil && sm[3] == state
	})
	sm := downDetail.FindStringSubmatch(p.Detail)
	if code != http.StatusServiceUnavailable || p.Code != api.CodeMountUnavailable || sm[1] != name || sm[2] != path {
		t.Fatalf("launch while down: %d %s %q", code, p.Code, p.Detail)
	}
	if _, err := time.Parse(time.RFC3339, sm[4]); err != nil {
		t.Fatalf("since %q in %q: %v", sm[4], p.Detail, err)
	}
	t.Logf("refusal: %d %s %s", code, p.Code, p.Detail)
	hcode, _, hbody := td.do(t, "GET", "/v1/health", "")
	var h api.Health
	json.Unmarshal([]byte(hbody), &h)
	if h.Status != api.HealthCritical {
		t.Errorf("/v1/health while the required mount is down: %d %s, want critical", hcode, hbody)
	}
}

// livezProbe polls /livez in the background and keeps every latency; stop ends it.
type livezProbe struct {
	mu        sync.Mutex
	latencies []time.Duration
	bad       []string
	stop      chan struct{}
	done      chan struct{}
}

func startLivez(td *testDaemon, every time.Duration) *livezProbe {
	lp := &livezProbe{stop: make(chan struct{}), done: make(chan struct{})}
	client := &http.Client{Transport: td.http.Transport, Timeout: 10 * time.Second}
	go func() {
		defer close(lp.done)
		for {
			select {
			case <-lp.stop:
				return
			case <-time.After(every):
			}
			start := time.Now()
			resp, err := client.Get("http://sandboxd/livez")
			d := time.Since(start)
			lp.mu.Lock()
			lp.latencies = append(lp.latencies, d)
			switch {
			case err != nil:
				lp.bad = append(lp.bad, err.Error())
			case resp.StatusCode != 200:
				lp.bad = append(lp.bad, resp.Status)
			}
			lp.mu.Unlock()
			if resp != nil {
				resp.Body.Close()
			}
		}
	}()
	return lp
}

// finish stops the probe and answers the sorted latencies and the failed answers.
func (lp *livezProbe) finish() ([]time.Duration, []string) {
	close(lp.stop)
	<-lp.done
	lp.mu.Lock()
	defer lp.mu.Unlock()
	sort.Slice(lp.latencies, func(i, j int) bool { return lp.latencies[i] < lp.latencies[j] })
	return lp.latencies, lp.bad
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q * float64(len(sorted)-1))
	return sorted[i]
}

// TestMountHungAbortedAndRemounted (issue 5 d, e): the FUSE server stops answering; /livez
// keeps answering 200 throughout; the daemon sees hung, aborts the connection, refuses
// launch (503 mount_unavailable naming mount, state, errno, since), reports critical
// health, and remounts once it can; afterwards no goroutine is left behind.
func TestMountHungAbortedAndRemounted(t *testing.T) {
	testenv.RequireRoot(t)
	mnt := mountDir(t, "agent")
	gate := filepath.Join(t.TempDir(), "gate")
	srv := fusetest.Start(t, mnt, fusetest.Options{})
	td := startMountDaemon(t, mountSpec{name: "agent", path: mnt, interval: 200 * time.Millisecond, timeout: 1500 * time.Millisecond,
		canary: true, remount: gated(gate, srv.RemountCommand(0)), maxRemounts: 30})
	td.waitMountState(t, "agent", api.MountHealthy)
	td.status(t) // warm the client's connection before counting goroutines
	time.Sleep(500 * time.Millisecond)
	before, threadsBefore := runtime.NumGoroutine(), threads()

	lp := startLivez(td, 20*time.Millisecond)
	srv.Hang()
	poll(t, time.Minute, "a hung event", func() bool {
		return len(td.eventsWith(t, api.EventMountProbe, "is hung: ETIMEDOUT")) > 0
	})
	poll(t, time.Minute, "an abort event", func() bool {
		return len(td.eventsWith(t, api.EventMountAbort, "aborted hung connection")) > 0
	})
	checkRefusal(t, td, "agent", mnt, api.MountHung)
	os.WriteFile(gate, nil, 0o644)
	m := td.waitMountState(t, "agent", api.MountHealthy)
	lat, bad := lp.finish()
	if len(bad) > 0 {
		t.Fatalf("/livez failed %d of %d times while the mount hung: %v", len(bad), len(lat), bad[0])
	}
	if len(lat) == 0 {
		t.Fatal("/livez was never asked")
	}
	t.Logf("/livez while hung: %d answers, all 200; p50 %v p99 %v max %v", len(lat), quantile(lat, 0.5), quantile(lat, 0.99), lat[len(lat)-1])
	waitRemountEvent(t, td, m)
	if code, p := launchMounts(t, td, "agent"); code != 200 {
		t.Fatalf("launch after the remount: %d %s", code, p.Detail)
	}
	// (e) Nothing stays stuck: the probe children caught in the hung mount were freed by
	// the abort and reaped, so the goroutines that waited for them are gone.
	const slack = 8
	poll(t, time.Minute, fmt.Sprintf("goroutines back to about %d", before), func() bool {
		return runtime.NumGoroutine() <= before+slack
	})
	t.Logf("goroutines %d → %d, threads %d → %d", before, runtime.NumGoroutine(), threadsBefore, threads())
}

// threads is this process's OS thread count (a thread stuck in a FUSE request would stay).
func threads() int {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			var n int
			fmt.Sscan(strings.TrimSpace(v), &n)
			return n
		}
	}
	return 0
}

package main

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// TestHandoverKeepsTheJobRegistry: a new daemon started with --wait-for-socket while the
// old one still serves, on the same socket and job registry (a package upgrade, a restart
// that overlaps, a DaemonSet's label flip), takes the registry over once the old one has
// stopped: it adopts the old one's running job (listed, its process still in its cgroup,
// ended by the new daemon on request) and accepts registrations of its own. Before the
// fix the new daemon tried the registry's lock once, at start, while the old daemon held
// it, and refused every registration for its whole life.
func TestHandoverKeepsTheJobRegistry(t *testing.T) {
	dir := openTempDir(t)
	cfg, root := jobsSiteConfig(t)
	old, sock, oldLog := serveDaemon(t, dir, cfg)
	env := []string{api.SocketEnv + "=" + sock}

	// A job of the old daemon, leased for longer than the test: only an end asked of the
	// new daemon may end it.
	pids := t.TempDir()
	runner := exec.Command(binary, "run", "--id", "before", "--site", "s", "--ttl", "10m", "--", "sh", "-c", "echo $$ > "+pids+"/cmd; exec sleep 600")
	runner.Env = append(os.Environ(), env...)
	if err := runner.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { runner.Process.Kill(); runner.Wait() })
	cmdPid := readPidFile(t, pids+"/cmd")
	waitUntil(t, time.Minute, "the old daemon's job to run", func() bool { return jobState(t, sock, "before").State == api.JobRunning })

	// The new daemon starts while the old one serves, and waits.
	newLog, exited := serveWaiting(t, dir)
	if r := sandboxd(t, env, "jobs", "list"); !strings.Contains(r.stdout, "before") {
		t.Fatalf("the old daemon no longer lists its job while the new one waits: %s%s", r.stdout, r.stderr)
	}

	old.Process.Signal(syscall.SIGTERM)
	if err := old.Wait(); err != nil {
		t.Errorf("the old daemon exited with %v after SIGTERM, want 0", err)
	}
	waitUntil(t, time.Minute, "the new daemon to take the socket", func() bool {
		return strings.Contains(newLog.String(), "socket taken")
	})
	// A runner waits for /readyz before it registers: the new daemon is ready once it
	// holds the registry, and answers registrations from then on.
	waitReady(t, sock)

	j := jobState(t, sock, "before")
	if j.State != api.JobRunning || j.Cgroup != filepath.Join(root, "jobs", "before") {
		t.Fatalf("the new daemon does not list the old one's job as running in its cgroup: %+v\nold daemon:\n%s\nnew daemon:\n%s", j, oldLog.String(), newLog.String())
	}
	procs, _ := os.ReadFile(filepath.Join(root, "jobs", "before", "cgroup.procs"))
	if !strings.Contains(" "+strings.Join(strings.Fields(string(procs)), " ")+" ", " "+strconv.Itoa(cmdPid)+" ") {
		t.Errorf("the adopted job's process %d is no longer in its cgroup (cgroup.procs %q)", cmdPid, procs)
	}

	// A registration of the new daemon: sandboxd run of a command that ends by itself.
	if r := sandboxd(t, env, "run", "--id", "after", "--site", "s", "--", "sh", "-c", "exit 0"); r.code != 0 {
		t.Fatalf("sandboxd run after the handover exited %d: %s%s\nnew daemon:\n%s", r.code, r.stdout, r.stderr, newLog.String())
	}
	if j := jobState(t, sock, "after"); j.ID != "after" {
		t.Errorf("the new daemon does not list the job it ran: %+v", j)
	}

	// The adopted job is the new daemon's to end: its process goes with it.
	if r := sandboxd(t, env, "jobs", "end", "before"); r.code != 0 {
		t.Fatalf("jobs end before: %d %s%s", r.code, r.stdout, r.stderr)
	}
	waitUntil(t, time.Minute, "the adopted job's process to end", func() bool { return !alivePid(cmdPid) })

	select {
	case err := <-exited:
		t.Fatalf("the new daemon exited (%v)\n%s", err, newLog.String())
	default:
	}
}

// waitReady polls /readyz on sock until it answers 200.
func waitReady(t *testing.T, sock string) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: client.DialUnix(sock)}, Timeout: 2 * time.Second}
	defer hc.CloseIdleConnections()
	waitUntil(t, time.Minute, "/readyz to answer 200", func() bool {
		resp, err := hc.Get("http://sandboxd/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// TestSharedRegistryWaitsForTheOtherDaemon: a daemon started (plain serve) on a job
// registry another one holds, as a restart that overlaps or two daemons given one
// registry_dir do, serves but is not ready: /readyz says it waits for the job registry,
// /v1/health raises JobRegistryHeld, and every job call is refused with exit 75 (retry)
// naming the registry, never an empty list. Once the other daemon stops, it takes the
// registry at once, is ready, lists and ends the other's running job, and runs its own.
func TestSharedRegistryWaitsForTheOtherDaemon(t *testing.T) {
	dirA, dirB := openTempDir(t), openTempDir(t)
	cfg, root := jobsSiteConfig(t)
	a, sockA, _ := serveDaemon(t, dirA, cfg)
	registry := filepath.Join(dirA, "registry")
	pids := t.TempDir()
	runner := exec.Command(binary, "run", "--socket", sockA, "--id", "before", "--site", "s", "--ttl", "10m", "--", "sh", "-c", "echo $$ > "+pids+"/cmd; exec sleep 600")
	if err := runner.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { runner.Process.Kill(); runner.Wait() })
	cmdPid := readPidFile(t, pids+"/cmd")
	waitUntil(t, time.Minute, "daemon A's job to run", func() bool { return jobState(t, sockA, "before").State == api.JobRunning })

	// Daemon B: its own socket and state dir, A's registry.
	sockB := filepath.Join(dirB, "s.sock")
	conf, err := os.ReadFile(filepath.Join(dirA, "sandboxd.toml"))
	if err != nil {
		t.Fatal(err)
	}
	confB := strings.NewReplacer(sockA, sockB, filepath.Join(dirA, "state"), filepath.Join(dirB, "state")).Replace(string(conf))
	os.WriteFile(filepath.Join(dirB, "sandboxd.toml"), []byte(confB), 0o644)
	logB := &testenv.SyncBuffer{}
	b := exec.Command(binary, "serve", "--config", filepath.Join(dirB, "sandboxd.toml"), "--registry-dir", registry)
	b.Stderr = logB
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- b.Wait() }()
	t.Cleanup(func() {
		b.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			b.Process.Kill()
		}
	})
	hc := &http.Client{Transport: &http.Transport{DialContext: client.DialUnix(sockB)}, Timeout: 5 * time.Second}
	defer hc.CloseIdleConnections()
	get := func(path string, v any) int {
		resp, err := hc.Get("http://sandboxd" + path)
		if err != nil {
			return 0
		}
		defer resp.Body.Close()
		json.NewDecoder(resp.Body).Decode(v)
		return resp.StatusCode
	}
	var rz api.Livez
	waitUntil(t, time.Minute, "daemon B to answer /readyz 503 waiting for the job registry", func() bool {
		return get("/readyz", &rz) == http.StatusServiceUnavailable && strings.Contains(rz.Reason, "job registry")
	})
	var h api.Health
	get("/v1/health", &h)
	held := false
	for _, c := range h.Conditions {
		if c.Type == api.CondJobRegistryHeld && c.Status && c.Subject == registry {
			held = true
		}
	}
	if !held {
		t.Errorf("daemon B's health does not raise JobRegistryHeld on %s: %+v", registry, h)
	}
	if r := sandboxd(t, nil, "run", "--socket", sockB, "--id", "early", "--site", "s", "--", "true"); r.code != 125 || !strings.Contains(r.stderr, "state_unavailable") || !strings.Contains(r.stderr, registry) {
		t.Errorf("sandboxd run on daemon B while A holds the registry: exit %d %s%s, want 125 (sandboxd refused), state_unavailable naming %s", r.code, r.stdout, r.stderr, registry)
	}
	if r := sandboxd(t, nil, "jobs", "list", "--socket", sockB); r.code != 75 || strings.Contains(r.stdout, "no jobs") {
		t.Errorf("jobs list on daemon B while A holds the registry: exit %d %s%s, want 75 (not an empty list)", r.code, r.stdout, r.stderr)
	}

	a.Process.Signal(syscall.SIGTERM)
	if err := a.Wait(); err != nil {
		t.Errorf("daemon A exited with %v after SIGTERM, want 0", err)
	}
	waitReady(t, sockB)
	if j := jobState(t, sockB, "before"); j.State != api.JobRunning || j.Cgroup != filepath.Join(root, "jobs", "before") {
		t.Fatalf("daemon B does not list A's job as running in its cgroup: %+v\n%s", j, logB.String())
	}
	if r := sandboxd(t, nil, "run", "--socket", sockB, "--id", "after", "--site", "s", "--", "true"); r.code != 0 {
		t.Fatalf("sandboxd run on daemon B once it holds the registry: exit %d %s%s", r.code, r.stdout, r.stderr)
	}
	if r := sandboxd(t, nil, "jobs", "end", "--socket", sockB, "before"); r.code != 0 {
		t.Fatalf("jobs end before on daemon B: %d %s%s", r.code, r.stdout, r.stderr)
	}
	waitUntil(t, time.Minute, "the adopted job's process to end", func() bool { return !alivePid(cmdPid) })
	get("/v1/health", &h)
	for _, c := range h.Conditions {
		if c.Type == api.CondJobRegistryHeld && c.Status {
			t.Errorf("JobRegistryHeld still raised once daemon B holds the registry: %+v", c)
		}
	}
}

// TestHandoverWaitsForTheRegistry: the old daemon closes its socket at once on SIGTERM
// but holds the job registry until the calls it took are answered: here a `jobs end` of
// a job that ignores SIGTERM, which takes its 5 s grace. The new daemon, started with
// --wait-for-socket, waits for the registry too (and says so) before it takes the socket,
// so it reads the registry after the old one's last write: the job the old one ended is
// listed as killed, the one still running is adopted, and registrations are answered.
func TestHandoverWaitsForTheRegistry(t *testing.T) {
	dir := openTempDir(t)
	cfg, root := jobsSiteConfig(t)
	old, sock, _ := serveDaemon(t, dir, cfg)
	env := []string{api.SocketEnv + "=" + sock}
	pids := t.TempDir()
	for _, job := range []struct{ id, grace, script string }{
		{"slow", "5s", "trap '' TERM; echo $$ > " + pids + "/slow; exec sleep 600"}, // SIG_IGN survives the exec
		{"kept", "500ms", "echo $$ > " + pids + "/kept; exec sleep 600"},
	} {
		r := exec.Command(binary, "run", "--id", job.id, "--site", "s", "--ttl", "10m", "--grace", job.grace, "--", "sh", "-c", job.script)
		r.Env = append(os.Environ(), env...)
		if err := r.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Process.Kill(); r.Wait() })
	}
	slowPid, keptPid := readPidFile(t, pids+"/slow"), readPidFile(t, pids+"/kept")
	waitUntil(t, time.Minute, "both jobs to run", func() bool {
		return jobState(t, sock, "slow").State == api.JobRunning && jobState(t, sock, "kept").State == api.JobRunning
	})

	newLog, _ := serveWaiting(t, dir)

	// A call the old daemon answers through its stop: the end of the slow job.
	end := exec.Command(binary, "jobs", "end", "slow")
	end.Env = append(os.Environ(), env...)
	var endOut testenv.SyncBuffer
	end.Stdout, end.Stderr = &endOut, &endOut
	if err := end.Start(); err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	go func() { ended <- end.Wait() }()
	waitUntil(t, time.Minute, "the slow job to be ending", func() bool { return jobState(t, sock, "slow").State == api.JobEnding })
	old.Process.Signal(syscall.SIGTERM)
	if err := <-ended; err != nil {
		t.Errorf("jobs end slow, in flight across the old daemon's stop: %v %s", err, endOut.String())
	}
	if err := old.Wait(); err != nil {
		t.Errorf("the old daemon exited with %v after SIGTERM, want 0", err)
	}
	waitUntil(t, time.Minute, "the new daemon to take the socket", func() bool {
		return strings.Contains(newLog.String(), "socket taken")
	})
	if !strings.Contains(newLog.String(), "waiting for it to let go of the job registry") {
		t.Errorf("the new daemon did not wait for the registry the old one held through its stop:\n%s", newLog.String())
	}
	waitReady(t, sock)
	if alivePid(slowPid) {
		t.Error("the slow job's process outlived its end")
	}
	if j := jobState(t, sock, "slow"); j.State != api.JobKilled {
		t.Errorf("the job the old daemon ended during its stop, as the new one lists it: %+v", j)
	}
	if j := jobState(t, sock, "kept"); j.State != api.JobRunning || j.Cgroup != filepath.Join(root, "jobs", "kept") {
		t.Fatalf("the new daemon does not list the running job in its cgroup: %+v\n%s", j, newLog.String())
	}
	if r := sandboxd(t, env, "run", "--id", "after", "--site", "s", "--", "true"); r.code != 0 {
		t.Fatalf("sandboxd run after the handover exited %d: %s%s", r.code, r.stdout, r.stderr)
	}
	if r := sandboxd(t, env, "jobs", "end", "kept"); r.code != 0 {
		t.Fatalf("jobs end kept: %d %s%s", r.code, r.stdout, r.stderr)
	}
	waitUntil(t, time.Minute, "the adopted job's process to end", func() bool { return !alivePid(keptPid) })
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// nobody is the attacker of the issue 21 tests: uid 65534, a writer through [server] writers.
const nobody = 65534

// asNobody runs the sandboxd binary at bin as uid 65534 and answers its exit code and
// stderr; a run that does not end within 30 s fails t (a hang is the bug).
func asNobody(t *testing.T, bin string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	var errb strings.Builder
	cmd.Stderr = &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("sandboxd %v as uid %d did not end within 30s", args, nobody)
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("sandboxd %v as uid %d: %v", args, nobody, err)
	}
	return code, errb.String()
}

// healthAnswers asks /v1/health with a 3 s deadline: any status counts, a hang does not.
func healthAnswers(t *testing.T, sock string) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: client.DialUnix(sock)}, Timeout: 3 * time.Second}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("http://sandboxd/v1/health")
	if err != nil {
		t.Fatalf("/v1/health did not answer: %v", err)
	}
	resp.Body.Close()
}

// TestHostileCredentialFilesBounded (issue 21 item 1): uid 65534, a writer, names
// /dev/zero, a FIFO nobody writes, a symlink to /dev/zero and a 1 MiB file as a mount's
// credential_file, with the daemon in a 256 MiB memory cgroup. Each registration is
// refused with 400 naming why, /v1/health keeps answering, and nothing is saved. The
// same registrations planted in the state file (as if saved by an older daemon) are
// quarantined at start with their reason and not tried again at the next start.
func TestHostileCredentialFilesBounded(t *testing.T) {
	prefix := testenv.MemoryLimited(t, 256<<20)
	base := openTempDir(t)
	bin := filepath.Join(base, "sandboxd")
	if b, err := os.ReadFile(binary); err != nil || os.WriteFile(bin, b, 0o755) != nil {
		t.Fatalf("copy the binary where uid %d may run it: %v", nobody, err)
	}
	own := filepath.Join(base, "own")
	os.Mkdir(own, 0o755)
	os.Chown(own, nobody, nobody)
	fifo := filepath.Join(own, "cred.fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chown(fifo, nobody, nobody)
	link := filepath.Join(own, "cred.link")
	os.Symlink("/dev/zero", link)
	big := filepath.Join(own, "big.json")
	os.WriteFile(big, []byte(`{"Expiration":"2099-01-01T00:00:00Z","Pad":"`+strings.Repeat("x", 1<<20)+`"}`), 0o644)
	os.Chown(big, nobody, nobody)
	files := map[string]string{"zero": "/dev/zero", "fifo": fifo, "link": link, "big": big}
	whys := map[string]string{"zero": "character device", "fifo": "FIFO", "link": "symlink", "big": "more than the 65536"}
	for name := range files {
		d := filepath.Join(own, name)
		os.Mkdir(d, 0o755)
		os.Chown(d, nobody, nobody)
	}
	mnt := testenv.Tmpfs(t, 8<<20, 0)
	cfg := fmt.Sprintf("[[filesystem]]\npath = %q\nreclaim_below = \"1MiB\"\nreplace_below = \"512KiB\"\nreserve = \"0\"\n", mnt)
	server := fmt.Sprintf("writers = [\"uid:%d\"]\nsocket_mode = \"0666\"", nobody)
	dir := filepath.Join(base, "d")
	os.Mkdir(dir, 0o755)
	daemon, sock, _ := serveDaemonIn(t, dir, cfg, server, prefix)

	for name, file := range files {
		code, stderr := asNobody(t, bin, "mounts", "add", "--socket", sock, "--credential-file", file, "h-"+name, filepath.Join(own, name))
		if code == 0 || !strings.Contains(stderr, whys[name]) || !strings.Contains(stderr, "bad_request") {
			t.Errorf("register with credential_file %s: exit %d, stderr %q; want a bad_request naming %q", file, code, stderr, whys[name])
		}
		healthAnswers(t, sock)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "state", "mounts.json")); err == nil && strings.Contains(string(b), "h-") {
		t.Errorf("a refused registration was saved: %s", b)
	}
	// A good file, registered, then swapped for a FIFO by its owner: the watcher's reads
	// neither block nor hold the lock every endpoint needs.
	good := filepath.Join(own, "good.json")
	os.WriteFile(good, []byte(`{"Expiration":"2099-01-01T00:00:00Z"}`), 0o644)
	os.Chown(good, nobody, nobody)
	swap := filepath.Join(own, "swap")
	os.Mkdir(swap, 0o755)
	os.Chown(swap, nobody, nobody)
	if code, stderr := asNobody(t, bin, "mounts", "add", "--socket", sock, "--credential-file", good, "--probe-interval", "200ms", "s-swap", swap); code != 0 {
		t.Fatalf("register a good credential file: exit %d %s", code, stderr)
	}
	if err := os.Rename(fifo, good); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		healthAnswers(t, sock)
		var m api.Mount
		getJSON(t, sock, "/v1/mounts/s-swap", &m)
		if strings.Contains(m.CredentialError, "FIFO") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the FIFO swapped in is not reported: %+v", m)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code, stderr := asNobody(t, bin, "mounts", "rm", "--socket", sock, "s-swap"); code != 0 {
		t.Fatalf("release: exit %d %s", code, stderr)
	}
	os.Rename(good, fifo)

	// Planted in the state file: quarantined at start, the daemon stays up and answers.
	daemon.Process.Signal(syscall.SIGTERM)
	daemon.Wait()
	var saved []map[string]any
	for name, file := range files {
		saved = append(saved, map[string]any{"registration": map[string]any{"name": "h-" + name, "path": filepath.Join(own, name), "credential_file": file},
			"registered_at": time.Now().UTC(), "registered_by": map[string]any{"uid": nobody, "gid": nobody, "groups": []int{}}})
	}
	b, _ := json.Marshal(saved)
	os.MkdirAll(filepath.Join(dir, "state"), 0o755)
	if err := os.WriteFile(filepath.Join(dir, "state", "mounts.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	daemon, sock, logs := serveDaemonIn(t, dir, cfg, server, prefix)
	healthAnswers(t, sock)
	list := mountList(t, sock)
	if len(list.Quarantined) != len(files) {
		t.Fatalf("quarantined %d of %d planted registrations: %+v\nlogs:\n%s", len(list.Quarantined), len(files), list.Quarantined, logs.String())
	}
	first := map[string]time.Time{}
	for _, q := range list.Quarantined {
		name := strings.TrimPrefix(q.Name, "h-")
		if !strings.Contains(q.Reason, whys[name]) || q.RegisteredBy == nil || q.RegisteredBy.UID != nobody {
			t.Errorf("quarantined %s: reason %q by %+v; want the reason %q and uid %d", q.Name, q.Reason, q.RegisteredBy, whys[name], nobody)
		}
		first[q.Name] = q.QuarantinedAt
	}
	if list.Registered != 0 {
		t.Errorf("%d mounts registered after the quarantine, want 0", list.Registered)
	}
	// The daemon's stderr reaches logs through a pipe and os/exec's copying goroutine, which
	// a loaded machine may run after the answers above: wait for the line.
	waitUntil(t, time.Minute, "the quarantine in the log", func() bool { return strings.Contains(logs.String(), "quarantined") })
	// Not tried again: the next start finds them in the quarantine only.
	daemon.Process.Signal(syscall.SIGTERM)
	daemon.Wait()
	_, sock, logs = serveDaemonIn(t, dir, cfg, server, prefix)
	list = mountList(t, sock)
	if len(list.Quarantined) != len(files) {
		t.Fatalf("after a second restart %d quarantined, want %d: %+v", len(list.Quarantined), len(files), list.Quarantined)
	}
	for _, q := range list.Quarantined {
		if !q.QuarantinedAt.Equal(first[q.Name]) {
			t.Errorf("%s quarantined again at the second start (%v, first %v)", q.Name, q.QuarantinedAt, first[q.Name])
		}
	}
	if strings.Contains(logs.String(), "quarantined at start") {
		t.Errorf("the second start tried a quarantined registration again:\n%s", logs.String())
	}
}

func mountList(t *testing.T, sock string) api.MountList {
	t.Helper()
	var l api.MountList
	getJSON(t, sock, "/v1/mounts", &l)
	return l
}

func getJSON(t *testing.T, sock, path string, v any) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: client.DialUnix(sock)}, Timeout: 5 * time.Second}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("http://sandboxd" + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

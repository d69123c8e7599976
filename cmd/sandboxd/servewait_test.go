package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// TestServeWaitsForTheSocket: the handover of a DaemonSet (issue 25). With another
// daemon answering on the socket, plain serve refuses to start (it never steals a live
// socket); with --wait-for-socket it waits, says so once, and takes the socket as soon as
// the other one stops, instead of exiting into a crash-loop backoff.
func TestServeWaitsForTheSocket(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "sandboxd.sock")
	old, err := net.Listen("unix", sock) // the old pod's daemon: it answers
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.LoadOrDefault("")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Server.Socket, cfg.Server.HTTP = sock, ""
	cfg.Jobs.RegistryDir = filepath.Join(dir, "registry") // never the machine's /run/sandboxd
	_, _, first := listeners(cfg)
	if first == nil || !strings.Contains(first.Error(), "another sandboxd is answering") {
		t.Fatalf("listen while another daemon answers: %v", first)
	}
	var log testenv.SyncBuffer
	type result struct {
		ln  net.Listener
		err error
	}
	got := make(chan result, 1)
	go func() {
		ln, _, err := waitForSocket(context.Background(), cfg, slog.New(slog.NewTextHandler(&log, nil)))
		got <- result{ln, err}
	}()
	testenv.Eventually(t, time.Minute, "the wait to be logged", func() bool {
		return strings.Contains(log.String(), "waiting for it to stop")
	})
	select {
	case r := <-got:
		t.Fatalf("serve did not wait while the other daemon answered: %v %v", r.ln, r.err)
	case <-time.After(10 * socketRetry): // several more tries
	}
	old.Close() // the old pod ends (its socket goes with it)
	r := <-got
	if r.err != nil {
		t.Fatalf("after the other daemon stopped: %v", r.err)
	}
	defer r.ln.Close()
	if c, err := net.Dial("unix", sock); err != nil {
		t.Errorf("the new daemon's socket does not answer: %v", err)
	} else {
		c.Close()
	}
	if n := strings.Count(log.String(), "waiting for it to stop"); n != 1 {
		t.Errorf("the wait was logged %d times, want once:\n%s", n, log.String())
	}
}

// TestWaitingServeRefusesABrokenConfigAtOnce: a rollout whose config sandboxd would
// refuse, started with --wait-for-socket while the good daemon serves, exits 78 at once
// naming the problem; it does not wait for the good daemon to stop first (which would
// leave the node without a daemon), and the good one goes on serving. What New refuses
// besides the loader is checked before the wait too (daemon.Validate, pinned to New's
// refusals by TestValidateRefusesWhatNewRefuses).
func TestWaitingServeRefusesABrokenConfigAtOnce(t *testing.T) {
	dir := openTempDir(t)
	old, sock, _ := serveDaemon(t, dir, "site = []\n[[filesystem]]\npath = \""+dir+"\"\n")
	conf, err := os.ReadFile(filepath.Join(dir, "sandboxd.toml"))
	if err != nil {
		t.Fatal(err)
	}
	broken := filepath.Join(dir, "broken.toml")
	text := strings.Replace(string(conf), "[server]\n", "[server]\nwriters = [\"user:sandboxd-no-such-user\"]\n", 1)
	if err := os.WriteFile(broken, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	next := exec.Command(binary, "serve", "--config", broken, "--registry-dir", filepath.Join(dir, "registry"), "--wait-for-socket")
	var log testenv.SyncBuffer
	next.Stderr = &log
	if err := next.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- next.Wait() }()
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 78 || !strings.Contains(log.String(), "sandboxd-no-such-user") {
			t.Errorf("serve --wait-for-socket of a broken config: %v, want exit 78 naming the user\n%s", err, log.String())
		}
	case <-time.After(2 * time.Minute):
		next.Process.Kill()
		<-exited
		t.Fatalf("serve --wait-for-socket of a broken config waited for the good daemon instead of exiting:\n%s", log.String())
	}
	if strings.Contains(log.String(), "waiting for it to stop") {
		t.Errorf("the broken config's daemon waited for the good one before refusing:\n%s", log.String())
	}
	if r := sandboxd(t, []string{"SANDBOXD_SOCKET=" + sock}, "status"); r.code != 0 {
		t.Errorf("the good daemon after the refused rollout: status exit %d %s%s", r.code, r.stdout, r.stderr)
	}
	if old.ProcessState != nil {
		t.Errorf("the good daemon exited: %v", old.ProcessState)
	}
}

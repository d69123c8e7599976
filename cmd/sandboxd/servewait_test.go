package main

import (
	"context"
	"log/slog"
	"net"
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

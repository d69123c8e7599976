package main

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// TestRunTrustsOnlyTheDaemonsUID (issue 21 item 7): a server at the socket that runs as
// uid 65534 (here a real sandboxd started by that user, as anyone could start a fake
// daemon at $SANDBOXD_SOCKET) is not trusted by root's `sandboxd run`: it exits 125 naming
// the uid, and the command never runs. --server-uid 65534 trusts it.
func TestRunTrustsOnlyTheDaemonsUID(t *testing.T) {
	testenv.RequireRoot(t)
	base := openTempDir(t)
	bin := filepath.Join(base, "sandboxd")
	dir := filepath.Join(base, "fake") // the fake daemon's own: socket, state, config
	os.Mkdir(dir, 0o755)
	os.Chown(dir, nobody, nobody)
	if b, err := os.ReadFile(binary); err != nil || os.WriteFile(bin, b, 0o755) != nil {
		t.Fatalf("copy the binary: %v", err)
	}
	sock := filepath.Join(dir, "fake.sock")
	cfg := fmt.Sprintf("[server]\nsocket = %q\nstate_dir = %q\n[[filesystem]]\npath = %q\nreclaim_below = \"1KiB\"\nreplace_below = \"1KiB\"\nreserve = \"0\"\n[reclaim]\nauto_caches = []\n",
		sock, filepath.Join(dir, "state"), dir)
	os.WriteFile(filepath.Join(dir, "fake.toml"), []byte(cfg), 0o644)
	fake := exec.Command(bin, "serve", "--config", filepath.Join(dir, "fake.toml"))
	fake.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	logs := &testenv.SyncBuffer{}
	fake.Stderr = logs
	if err := fake.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fake.Process.Kill(); fake.Wait() })
	hc := &http.Client{Transport: &http.Transport{DialContext: client.DialUnix(sock)}, Timeout: 2 * time.Second}
	defer hc.CloseIdleConnections()
	deadline := time.Now().Add(time.Minute)
	for {
		if resp, err := hc.Get("http://sandboxd/livez"); err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the uid %d server did not come up:\n%s", nobody, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	marker := filepath.Join(dir, "ran")
	r := sandboxd(t, nil, "run", "--socket", sock, "--", "touch", marker)
	if r.code != exitRunFailed || !strings.Contains(r.stderr, "uid 65534") || !strings.Contains(r.stderr, "not trusted") {
		t.Errorf("run against a uid %d server: exit %d, stderr %q; want %d naming the uid", nobody, r.code, r.stderr, exitRunFailed)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the command ran under an untrusted server")
	}
	r = sandboxd(t, nil, "run", "--socket", sock, "--server-uid", "65534", "--", "true")
	if strings.Contains(r.stderr, "not trusted") {
		t.Errorf("--server-uid 65534 still refused the server: %q", r.stderr)
	}
}

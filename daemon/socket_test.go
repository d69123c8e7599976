package daemon

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

func TestSocketModeAndGroup(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "s.sock")
	ln, err := ListenUnix(path, 0o640, "65534")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o640 || st.Gid != 65534 {
		t.Fatalf("socket mode %v gid %d, want socket 0640 gid 65534", fi.Mode(), st.Gid)
	}
	ln.Close()
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Fatalf("socket file left after Close: %v", err)
	}
}

func TestStaleSocketReplacedLiveNotStolen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s.sock")
	// A stale socket: bound, then its listener gone without unlinking (a crash).
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	ln, err := ListenUnix(path, 0o660, "")
	if err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}
	defer ln.Close()
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	// A second daemon must not steal the live socket.
	if _, err := ListenUnix(path, 0o660, ""); err == nil || !strings.Contains(err.Error(), "another sandboxd is answering") {
		t.Fatalf("live socket: err = %v, want a clear refusal", err)
	}
	if c, err := net.Dial("unix", path); err != nil {
		t.Fatalf("live socket was disturbed: %v", err)
	} else {
		c.Close()
	}
	// A regular file at the path is never replaced.
	file := filepath.Join(dir, "file")
	os.WriteFile(file, []byte("data"), 0o644)
	if _, err := ListenUnix(file, 0o660, ""); err == nil {
		t.Fatal("a regular file was replaced by a socket")
	}
	if b, _ := os.ReadFile(file); string(b) != "data" {
		t.Fatal("the regular file changed")
	}
}

// TestPeerAuthorization connects as other uids from child processes: a stranger gets
// 403 on a mutating route (and may read), a member of a writer group through a
// supplementary group is allowed, and the refusal is an event naming uid and pid.
func TestPeerAuthorization(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	td := startDaemon(t, noSites(dir)+"", func(o *Options) {})
	td.d.cfgMu.Lock()
	td.d.writersV = Writers{GIDs: []uint32{4242}}
	td.d.cfgMu.Unlock()

	run := func(uid, gid uint32, groups []uint32, method, path string) int {
		t.Helper()
		status, _ := requestAs(t, td, uid, gid, groups, method, path, "{}")
		return status
	}
	if got := run(65534, 65534, nil, "POST", "/v1/reclaim"); got != 403 {
		t.Errorf("stranger POST /v1/reclaim: %d, want 403", got)
	}
	if got := run(65534, 65534, nil, "GET", "/v1/status"); got != 200 {
		t.Errorf("stranger GET /v1/status: %d, want 200", got)
	}
	if got := run(65534, 65534, []uint32{4242}, "POST", "/v1/launch"); got != 200 {
		t.Errorf("writer-group member POST /v1/launch: %d, want 200", got)
	}
	page, _ := td.client.Events(context.Background(), 0)
	found := false
	for _, e := range page.Events {
		if e.Kind == "refusal" && strings.Contains(e.Message, "uid 65534") && e.Fields["pid"] != nil {
			found = true
		}
	}
	if !found {
		t.Errorf("no refusal event naming uid 65534 and its pid in %+v", page.Events)
	}
}

// requestAs makes one request to td's socket from a child process running as uid, gid and
// groups (the peer credentials the daemon sees), and returns the status and the body.
func requestAs(t *testing.T, td *testDaemon, uid, gid uint32, groups []uint32, method, path, body string) (int, string) {
	t.Helper()
	return requestAsIn(t, td, uid, gid, groups, "", method, path, body)
}

// requestAsIn is requestAs from a process started in the cgroup dir ("" = the test's own).
func requestAsIn(t *testing.T, td *testDaemon, uid, gid uint32, groups []uint32, cgroup, method, path, body string) (int, string) {
	t.Helper()
	// The test binary lives in a 0700 build dir: copy it where another uid can run it.
	helper := filepath.Join(td.dir, "helper.test")
	if _, err := os.Stat(helper); err != nil {
		if b, err := os.ReadFile(os.Args[0]); err != nil || os.WriteFile(helper, b, 0o755) != nil {
			t.Fatalf("copy test binary: %v", err)
		}
	}
	cmd := exec.Command(helper, "-test.run=^TestHelperRequest$")
	cmd.Dir = td.dir
	cmd.Env = append(os.Environ(), "SANDBOXD_HELPER_REQUEST="+method+" "+path, "SANDBOXD_HELPER_SOCKET="+td.sock,
		"SANDBOXD_HELPER_BODY="+body)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: groups}}
	if cgroup != "" {
		fd, err := syscall.Open(cgroup, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
		if err != nil {
			t.Fatalf("open cgroup %s: %v", cgroup, err)
		}
		defer syscall.Close(fd)
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper as uid %d: %v\n%s", uid, err, out)
	}
	status, answer := 0, ""
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if s, ok := strings.CutPrefix(sc.Text(), "STATUS "); ok {
			status, _ = strconv.Atoi(s)
		}
		if s, ok := strings.CutPrefix(sc.Text(), "BODY "); ok {
			answer = s
		}
	}
	if status == 0 {
		t.Fatalf("helper printed no status:\n%s", out)
	}
	return status, answer
}

// TestHelperRequest is the child side of requestAs.
func TestHelperRequest(t *testing.T) {
	spec := os.Getenv("SANDBOXD_HELPER_REQUEST")
	if spec == "" {
		t.Skip("helper process only")
	}
	method, path, _ := strings.Cut(spec, " ")
	sock := os.Getenv("SANDBOXD_HELPER_SOCKET")
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return net.Dial("unix", sock)
	}}}
	body := os.Getenv("SANDBOXD_HELPER_BODY")
	if body == "" {
		body = "{}"
	}
	req, _ := http.NewRequest(method, "http://sandboxd"+path, strings.NewReader(body))
	resp, err := c.Do(req)
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Printf("STATUS %d\nBODY %s\n", resp.StatusCode, bytes.ReplaceAll(answer, []byte("\n"), nil))
}

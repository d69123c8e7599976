package systemd

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// activationHelper is the child side: it takes the listener systemd-style and answers
// one connection with what it learnt, so the parent can check it through the socket.
func activationHelper() error {
	if !Activated() {
		return fmt.Errorf("Activated() = false with LISTEN_PID=%s (pid %d)", os.Getenv("LISTEN_PID"), os.Getpid())
	}
	var lns []net.Listener
	var err error
	name := "-"
	if os.Getenv("LISTEN_FDNAMES") != "" {
		var named map[string][]net.Listener
		named, err = ListenersWithNames()
		for n, l := range named {
			name = n
			lns = append(lns, l...)
		}
	} else {
		lns, err = Listeners()
	}
	if err != nil {
		fmt.Println("error:", err) // the parent reads stdout when it expects a failure
		return nil
	}
	if len(lns) != 1 {
		return fmt.Errorf("got %d listeners, want 1", len(lns))
	}
	for _, v := range []string{"LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"} {
		if _, set := os.LookupEnv(v); set {
			return fmt.Errorf("%s still set after Listeners", v)
		}
	}
	ln := lns[0]
	defer ln.Close()
	conn, err := ln.Accept()
	if err != nil {
		return err
	}
	defer conn.Close()
	req, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(conn, "%s %s %s %s\n", strings.TrimSpace(req), ln.Addr().Network(), name, ln.Addr())
	return err
}

// startActivated runs the test binary as a socket-activated child: fd 3 is extra, and
// LISTEN_PID is set by a shell to its own pid right before it execs the child, the way
// systemd sets it after fork.
func startActivated(t *testing.T, extra *os.File, env ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/bin/sh", "-c", `LISTEN_PID=$$ exec "$0"`, exe)
	cmd.Env = append(os.Environ(), helperEnv+"=activation", "LISTEN_FDS=1")
	cmd.Env = append(cmd.Env, env...)
	cmd.ExtraFiles = []*os.File{extra}
	cmd.Stderr = os.Stderr
	return cmd
}

func testActivation(t *testing.T, fdnames, wantName string) {
	path := filepath.Join(t.TempDir(), "api.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	f, err := ln.File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var env []string
	if fdnames != "" {
		env = append(env, "LISTEN_FDNAMES="+fdnames)
	}
	cmd := startActivated(t, f, env...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill() // no-op once it exited; never leaves a child behind

	conn, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintln(conn, "ping")
	got, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		t.Fatalf("read the child's answer: %v", err)
	}
	want := fmt.Sprintf("ping unix %s %s\n", wantName, path)
	if got != want {
		t.Fatalf("child answered %q, want %q", got, want)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
}

func TestListenersServesThroughPassedSocket(t *testing.T) {
	testActivation(t, "", "-")
}

func TestListenersWithNames(t *testing.T) {
	testActivation(t, "sandboxd.socket", "sandboxd.socket")
}

func TestListenersRejectsNonSocketFd(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "not-a-socket"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := startActivated(t, f)
	cmd.Stderr = nil
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	if !strings.Contains(string(out), "error: socket activation: fd 3 (LISTEN_FD_3) is not a listening stream socket") {
		t.Fatalf("child said %q, want the fd named as not a socket", out)
	}
}

func TestListenersForAnotherPid(t *testing.T) {
	// LISTEN_PID of another process (a parent that forgot to unset it): not for us, and
	// fd 3 of this process must not be touched.
	t.Setenv("LISTEN_PID", fmt.Sprint(os.Getpid()+1))
	t.Setenv("LISTEN_FDS", "1")
	lns, err := Listeners()
	if err != nil || lns != nil {
		t.Fatalf("Listeners() = %v, %v; want nil, nil", lns, err)
	}
	if _, set := os.LookupEnv("LISTEN_FDS"); set {
		t.Fatal("LISTEN_FDS still set: a child would inherit it")
	}
}

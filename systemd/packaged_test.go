package systemd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestPackagedUnitsUnderRealSystemd runs the shipped sandboxd.socket and sandboxd.service
// unchanged but for a drop-in (the helper as ExecStart, no default dependencies, which
// would boot the host's sysinit.target in the namespace): the hardening lets a Go
// notify service run, a connection to the socket activates it, the listener arrives
// named after the socket unit, and the socket survives a restart of the service.
func TestPackagedUnitsUnderRealSystemd(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	units := map[string]string{}
	for _, name := range []string{"sandboxd.service", "sandboxd.socket"} {
		b, err := os.ReadFile(filepath.Join("..", "packaging", "systemd", name))
		if err != nil {
			t.Fatal(err)
		}
		units[name] = string(b)
	}
	units["sandboxd.socket.d/test.conf"] = "[Unit]\nDefaultDependencies=no\n"
	units["sandboxd.service.d/test.conf"] = fmt.Sprintf(
		"[Unit]\nDefaultDependencies=no\n[Service]\nExecStart=\nExecStart=%s\nEnvironment=%s=serve\nStandardOutput=append:/run/helper.log\nStandardError=append:/run/helper.log\n",
		exe, helperEnv)
	sd := startPrivateSystemd(t, units)

	if out, err := sd.systemctl("start", "sandboxd.socket"); err != nil {
		t.Fatalf("systemctl start sandboxd.socket: %v\n%s", err, out)
	}
	sock := filepath.Join(sd.run, "sandboxd", "sandboxd.sock")
	for path, want := range map[string]os.FileMode{sock: 0o660, filepath.Dir(sock): 0o755} {
		fi, err := os.Stat(path)
		if err != nil || fi.Mode().Perm() != want {
			t.Fatalf("%s: %v, %v; want mode %v", path, fi.Mode(), err, want)
		}
	}
	ask := func() string {
		t.Helper()
		conn, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(30 * time.Second))
		line, err := bufio.NewReader(conn).ReadString('\n')
		if err != nil {
			t.Fatalf("read from the activated service: %v", err)
		}
		return strings.TrimSpace(line)
	}
	// NoNewPrivileges= and SystemCallFilter= are in force (seccomp mode 2: filter), and
	// the bounding set is exactly the ten capabilities of the unit: bits 0-3 (chown,
	// dac_override, dac_read_search, fowner), 5-7 (kill, setgid, setuid), 9
	// (linux_immutable), 19 (sys_ptrace), 21 (sys_admin).
	const want = "sandboxd.socket state=/var/lib/sandboxd CapBnd=00000000002802ef NoNewPrivs=1 Seccomp=2"
	if got := ask(); got != want {
		t.Fatalf("activated service said %q, want %q", got, want)
	}
	s := sd.show("sandboxd.service", "ActiveState", "StatusText", "NRestarts", "MainPID")
	if s["ActiveState"] != "active" || s["StatusText"] != "serving" {
		t.Fatalf("sandboxd.service: %v; want active with STATUS=serving", s)
	}
	if fi, err := os.Stat(filepath.Join(sd.run, "..", "var-lib", "sandboxd")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("StateDirectory: %v, %v; want a 0700 directory", fi, err)
	}

	if out, err := sd.systemctl("restart", "sandboxd.service"); err != nil {
		t.Fatalf("systemctl restart: %v\n%s", err, out)
	}
	if got := ask(); got != want {
		t.Fatalf("after a restart the service said %q", got)
	}
	if after := sd.show("sandboxd.service", "MainPID")["MainPID"]; after == s["MainPID"] {
		t.Fatal("restart kept the same main process")
	}
}

// serveHelper stands in for `sandboxd serve` under the packaged units: it takes the
// activated socket, reports ready, and answers each connection with the listener's name.
func serveHelper() error {
	named, err := ListenersWithNames()
	if err != nil {
		return err
	}
	lns := named["sandboxd.socket"]
	if len(named) != 1 || len(lns) != 1 {
		return fmt.Errorf("listeners %v; want one named sandboxd.socket", named)
	}
	ln := lns[0]
	n := &Notifier{}
	if err := n.Ready(); err != nil {
		return err
	}
	if err := n.Status("serving"); err != nil {
		return err
	}
	interval, _ := WatchdogInterval()
	go (&Watchdog{Notifier: n, Interval: interval, Fresh: func() bool { return true }}).Run(context.Background())
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	go func() { <-term; n.Stopping(); ln.Close() }()
	for {
		conn, err := ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return nil
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(conn, "sandboxd.socket state=%s %s\n", os.Getenv("STATE_DIRECTORY"), hardening())
		conn.Close()
	}
}

// hardening reports the fields of /proc/self/status that the unit's hardening sets.
func hardening() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ":")
		if k == "NoNewPrivs" || k == "Seccomp" || k == "CapBnd" {
			out = append(out, k+"="+strings.TrimSpace(v))
		}
	}
	return strings.Join(out, " ")
}

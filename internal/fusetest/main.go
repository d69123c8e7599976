package fusetest

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The roles a test binary is re-executed for (os.Args[1]).
const (
	roleServe = "fusetest-serve"
	roleStart = "fusetest-start"
)

// Main runs the child role the binary was re-executed for and exits; when os.Args names
// no role it returns at once. Call it first in TestMain.
func Main() {
	if code, ok := Dispatch(os.Args[1:]); ok {
		os.Exit(code)
	}
}

// Dispatch runs the role named by args[0] and reports its exit code; ok is false when
// args name no fusetest role.
func Dispatch(args []string) (code int, ok bool) {
	if len(args) == 0 {
		return 0, false
	}
	switch args[0] {
	case roleServe:
		return serve(args[1:]), true
	case roleStart:
		return start(args[1:]), true
	}
	return 0, false
}

// start is the role a remount command runs: it starts the server role detached (its own
// session, output not inherited, so a caller that waits for our output does not wait for
// the server), waits until it says ready, records its pid and exits. --kill kills the
// server named in --pidfile first, and --renew rewrites --cred to expire that far ahead,
// as a restart with fresh static keys would.
func start(args []string) int {
	fl := flag.NewFlagSet(roleStart, flag.ContinueOnError)
	pidfile := fl.String("pidfile", "", "file that keeps the server's pid")
	pidlog := fl.String("pidlog", "", "file every started pid is appended to, for cleanup")
	renew := fl.Duration("renew", 0, "rewrite --cred to expire this far ahead first")
	kill := fl.Bool("kill", false, "kill the server named in --pidfile first")
	foreground := fl.Bool("foreground", false, "after ready, stay until the server exits (as `rclone mount` without --daemon)")
	cred := fl.String("cred", "", "credential file")
	fl.String("dir", "", "mountpoint")
	fl.String("backing", "", "backing directory")
	fl.Bool("reload", false, "re-read the credential file on every request")
	fl.Int("user-id", 0, "owner of the mount")
	fl.String("ack", "", "file the server acknowledges SIGUSR1 and SIGUSR2 in")
	if err := fl.Parse(args); err != nil {
		return 2
	}
	if *kill {
		if pid := readPid(*pidfile); pid > 0 {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if *renew > 0 {
		if err := WriteCred(*cred, time.Now().Add(*renew)); err != nil {
			fmt.Println(err)
			return 1
		}
	}
	serveArgs := []string{roleServe}
	fl.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "dir", "backing", "cred", "reload", "user-id", "ack":
			serveArgs = append(serveArgs, "--"+f.Name+"="+f.Value.String())
		}
	})
	exe, err := os.Executable()
	if err != nil {
		fmt.Println(err)
		return 1
	}
	cmd := exec.Command(exe, serveArgs...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Println(err)
		return 1
	}
	if err := cmd.Start(); err != nil {
		fmt.Println(err)
		return 1
	}
	pid := cmd.Process.Pid
	if *pidlog != "" {
		if f, err := os.OpenFile(*pidlog, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			fmt.Fprintln(f, pid)
			f.Close()
		}
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		fmt.Println("server did not start:", strings.TrimSpace(line))
		syscall.Kill(pid, syscall.SIGKILL)
		return 1
	}
	if *pidfile != "" {
		if err := os.WriteFile(*pidfile, []byte(strconv.Itoa(pid)), 0o644); err != nil {
			fmt.Println(err)
			return 1
		}
	}
	fmt.Println("started", pid)
	if *foreground {
		if err := cmd.Wait(); err != nil {
			return 1
		}
	}
	return 0
}

// readPid reads a pid file; 0 when absent or unreadable.
func readPid(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

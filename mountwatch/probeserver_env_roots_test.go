package mountwatch

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// probeOwnerChildEnv makes the test binary a stand-in daemon (TestMain): it lowers its
// own oom_score_adj to -900, as the packaged unit's OOMScoreAdjust does (500 where it
// may not lower it), carries a fake
// secret in its environment, starts the probe server of uid 65534 and prints its pid;
// it stops the server when its stdin closes.
const probeOwnerChildEnv = "MOUNTWATCH_TEST_PROBE_OWNER_CHILD"

const fakeDaemonSecret = "SANDBOXD_TEST_DAEMON_SECRET=AKIAFAKEDAEMONSECRET"

func probeOwnerChild(bin string) int {
	// -900 needs CAP_SYS_RESOURCE, which a container may lack: then 500 (raising one's
	// own needs nothing), which the server must not inherit either.
	if err := os.WriteFile("/proc/self/oom_score_adj", []byte("-900"), 0); err != nil {
		if err := os.WriteFile("/proc/self/oom_score_adj", []byte("500"), 0); err != nil {
			fmt.Println("ERR", err)
			return 1
		}
	}
	var ps probeServers
	s, err := ps.server([]string{bin, "mount-probe"}, &syscall.Credential{Uid: 65534, Gid: 65534})
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	fmt.Println("PID", s.pid)
	io.Copy(io.Discard, os.Stdin)
	ps.closeAll()
	return 0
}

// TestProbeServerOfNonRootOwnerIsTheOwners (issue 21 item 10): the probe server a mount
// of uid 65534 starts gets the documented environment only (PATH, HOME, USER, LOGNAME and
// the locale and time zone), never the daemon's (a fake secret here), and the default
// oom_score_adj of 0 while the daemon's own is -900 (500 in a container without
// CAP_SYS_RESOURCE) — as the commands of registered mounts
// do. The "daemon" is a child of the test with its own oom_score_adj, not this machine's.
func TestProbeServerOfNonRootOwnerIsTheOwners(t *testing.T) {
	testenv.RequireRoot(t)
	cmd := exec.Command(testBin)
	cmd.Env = append(os.Environ(), probeOwnerChildEnv+"="+testBin, fakeDaemonSecret)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() })
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	pidS, ok := strings.CutPrefix(strings.TrimSpace(line), "PID ")
	pid, err := strconv.Atoi(pidS)
	if !ok || err != nil {
		t.Fatalf("the stand-in daemon said %q", line)
	}
	proc := func(pid int, f string) string {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/" + f)
		return string(b)
	}
	daemonAdj := strings.TrimSpace(proc(cmd.Process.Pid, "oom_score_adj"))
	if daemonAdj != "-900" && daemonAdj != "500" {
		t.Fatalf("the stand-in daemon's oom_score_adj is %q, want -900 (or 500 without CAP_SYS_RESOURCE)", daemonAdj)
	}
	t.Logf("the stand-in daemon's oom_score_adj: %s", daemonAdj)
	// The server is the probe binary once the wrapper has exec'd it (after it reset
	// oom_score_adj) and the exec is done: the kernel points /proc/pid/exe at the new
	// binary before it lays out the new stack, and until then environ reads empty (seen
	// under load: "" in its environment).
	deadline := time.Now().Add(30 * time.Second)
	for {
		if exe, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe"); exe == testBin &&
			strings.Contains(proc(pid, "cmdline"), "--serve") && proc(pid, "environ") != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d never became the probe server %s", pid, testBin)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := strings.TrimSpace(proc(pid, "oom_score_adj")); got != "0" {
		t.Errorf("the probe server of uid 65534 has oom_score_adj %q, want 0 (the daemon's is %s)", got, daemonAdj)
	}
	allowed := map[string]bool{"PATH": true, "HOME": true, "USER": true, "LOGNAME": true, "LANG": true, "LC_ALL": true, "LC_CTYPE": true, "TZ": true}
	env := strings.Split(strings.TrimRight(proc(pid, "environ"), "\x00"), "\x00")
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if !allowed[k] {
			t.Errorf("the probe server of uid 65534 has %q in its environment, outside the documented allow-list", kv)
		}
	}
	if len(env) < 4 {
		t.Errorf("the probe server's environment %q lacks PATH, HOME, USER or LOGNAME", env)
	}
	if st := proc(pid, "status"); !strings.Contains(st, "\nUid:\t65534\t") {
		t.Errorf("the probe server does not run as uid 65534:\n%s", st)
	}
}

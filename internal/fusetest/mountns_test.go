package fusetest

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// A mount namespace made while other tests' FUSE mounts exist lets go of its copies of
// them (testenv.DetachFUSECopies): unmounted on the host, such a mount's server exits
// while the namespace still runs. The mount the namespace keeps stays in it.
func TestNamespaceLetsGoOfOtherTestsFUSEMounts(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommand(t, "unshare")
	// A path with a space: mountinfo escapes it (\040).
	other := filepath.Join(t.TempDir(), "other mnt")
	keptDir := t.TempDir()
	kept := filepath.Join(keptDir, "kept")
	for _, d := range []string{other, kept} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	srv := Start(t, other, Options{})
	Start(t, kept, Options{})

	// The namespace runs until the test closes its stdin.
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "/bin/sh", "-c",
		testenv.DetachFUSECopies(keptDir)+"\necho ready\ncat >/dev/null")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() })
	if line, _ := bufio.NewReader(stdout).ReadString('\n'); strings.TrimSpace(line) != "ready" {
		t.Fatalf("namespace script: %q", line)
	}
	nsInfo, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", cmd.Process.Pid)) // unshare execs the shell)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(nsInfo), strings.ReplaceAll(other, " ", `\040`)+" ") {
		t.Errorf("the namespace still holds a copy of %s", other)
	}
	if !strings.Contains(string(nsInfo), " "+kept+" ") {
		t.Errorf("the namespace lost the mount it keeps, %s", kept)
	}

	pid := srv.Pid()
	if err := syscall.Unmount(other, 0); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "the unmounted mount's server to exit while the namespace runs", func() bool {
		return !alive(pid)
	})
	if !alive(cmd.Process.Pid) {
		t.Fatal("the namespace ended early: the test proves nothing")
	}
}

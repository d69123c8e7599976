package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// readmeCommands returns the "$ " lines of the README's console blocks, with the exit
// status each expects ("# exit N" at the end of the line; 0 otherwise).
func readmeCommands(t *testing.T) (cmds []string, exits []int) {
	f, err := os.Open("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	inConsole := false
	exitRe := regexp.MustCompile(`#\s*exit\s+(\d+)\s*$`)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "```console"):
			inConsole = true
		case strings.HasPrefix(line, "```"):
			inConsole = false
		case inConsole && strings.HasPrefix(line, "$ "):
			cmd := strings.TrimPrefix(line, "$ ")
			code := 0
			if m := exitRe.FindStringSubmatch(cmd); m != nil {
				code, _ = strconv.Atoi(m[1])
				cmd = strings.TrimSpace(exitRe.ReplaceAllString(cmd, ""))
			}
			cmds = append(cmds, cmd)
			exits = append(exits, code)
		}
	}
	return cmds, exits
}

// TestReadmeWalkthrough runs every command of the README's walkthrough against a real
// daemon on a tmpfs, and checks each exits as the README says and prints something, and
// that the walkthrough (its refused 1TiB launch, resume, dry run) deleted no cache entry.
func TestReadmeWalkthrough(t *testing.T) {
	testenv.RequireCommand(t, "curl")
	testenv.RequireCommand(t, "python3")
	mnt := testenv.Tmpfs(t, 64<<20, 0)
	os.Mkdir(filepath.Join(mnt, "aura-bg"), 0o755)
	entry := filepath.Join(mnt, "cache", "pkg.tgz")
	os.Mkdir(filepath.Dir(entry), 0o755)
	testenv.Fill(entry, 1<<20)
	old := time.Now().Add(-48 * time.Hour)
	os.Chtimes(entry, old, old)
	dir := t.TempDir()
	_, sock, _ := serveDaemon(t, dir, fmt.Sprintf(`[[site]]
name = "aura-bg"
path = %q
[[filesystem]]
path = %q
reclaim_below = "4MiB"
replace_below = "1MiB"
reserve = "0"
[[reclaim.cache]]
name = "pkgs"
path = %q
`, filepath.Join(mnt, "aura-bg"), mnt, filepath.Dir(entry)))
	cmds, exits := readmeCommands(t)
	if len(cmds) < 10 {
		t.Fatalf("found only %d walkthrough commands in README.md", len(cmds))
	}
	for i, c := range cmds {
		cmd := exec.Command("bash", "-c", c)
		cmd.Env = append(os.Environ(), "SANDBOXD_SOCKET="+sock, "PATH="+filepath.Dir(binary)+":"+os.Getenv("PATH"))
		out, err := cmd.Output()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("%s: %v", c, err)
		}
		if code != exits[i] {
			t.Errorf("README command %q exited %d, the README says %d", c, code, exits[i])
		}
		if code == 0 && len(strings.TrimSpace(string(out))) == 0 {
			t.Errorf("README command %q printed nothing", c)
		}
	}
	if _, err := os.Stat(entry); err != nil {
		t.Errorf("the walkthrough deleted a cache entry: %v", err)
	}
}

// TestMakeRunPassesArgs: `make run ARGS='--mode observe'` (as the README says) hands the
// extra flags to serve, and the hint it prints puts bin/ on PATH for the walkthrough.
func TestMakeRunPassesArgs(t *testing.T) {
	testenv.RequireCommand(t, "make")
	cmd := exec.Command("make", "-n", "run", "ARGS=--mode observe")
	cmd.Dir = "../.."
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make -n run: %v\n%s", err, out)
	}
	serve := ""
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, " serve ") {
			serve = l
		}
	}
	if !strings.HasSuffix(strings.TrimSpace(serve), "--mode observe") {
		t.Errorf("make run does not pass ARGS to serve:\n%s", out)
	}
	if !strings.Contains(string(out), "export PATH=") {
		t.Errorf("make run's hint does not put bin/ on PATH:\n%s", out)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"export PATH=$PWD/bin:$PATH", "make run ARGS='--mode observe'"} {
		if !strings.Contains(string(readme), want) {
			t.Errorf("README.md lacks %q", want)
		}
	}
}

// Package units_test checks the systemd units sandboxd ships: that they hold what the
// daemon relies on (Type=notify, the watchdog, namespace-free hardening, a socket that
// survives restarts) and that systemd-analyze verify has nothing to say about them.
package units_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// unit is a parsed unit file: section -> key -> values in order (keys may repeat).
type unit map[string]map[string][]string

func parseUnit(t *testing.T, path string) unit {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u := unit{}
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = strings.Trim(line, "[]")
			u[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s:%d: not a key=value in a section: %q", path, n, line)
			}
			k = strings.TrimSpace(k)
			u[section][k] = append(u[section][k], strings.TrimSpace(v))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return u
}

func TestServiceUnit(t *testing.T) {
	u := parseUnit(t, "sandboxd.service")
	want := map[string]string{
		"Type":                    "notify",
		"NotifyAccess":            "main",
		"WatchdogSec":             "30s",
		"Restart":                 "always",
		"ExecStart":               "/usr/bin/sandboxd serve --config /etc/sandboxd/sandboxd.toml $ARGS",
		"EnvironmentFile":         "-/etc/default/sandboxd",
		"Delegate":                "yes",
		"KillMode":                "process",
		"ExecReload":              "/usr/bin/sandboxd config reload",
		"OOMScoreAdjust":          "-900",
		"CapabilityBoundingSet":   "CAP_DAC_OVERRIDE CAP_DAC_READ_SEARCH CAP_FOWNER CAP_KILL CAP_SYS_ADMIN CAP_SYS_PTRACE CAP_LINUX_IMMUTABLE CAP_SETUID CAP_SETGID CAP_CHOWN",
		"NoNewPrivileges":         "yes",
		"SystemCallFilter":        "@system-service @mount",
		"RestrictNamespaces":      "yes",
		"ProtectHostname":         "yes",
		"StateDirectory":          "sandboxd",
		"SystemCallArchitectures": "native",
		"LockPersonality":         "yes",
		"RestrictRealtime":        "yes",
		"RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6 AF_NETLINK",
		"UMask":                   "0077",
	}
	for k, v := range want {
		if got := u["Service"][k]; !slices.Equal(got, []string{v}) {
			t.Errorf("[Service] %s = %q, want exactly %q", k, got, v)
		}
	}
	// A crash loop ends in a failed unit (issue 25): 5 starts of RestartSec=2s fit in 60s.
	for k, v := range map[string]string{"StartLimitIntervalSec": "60s", "StartLimitBurst": "5"} {
		if got := u["Unit"][k]; !slices.Equal(got, []string{v}) {
			t.Errorf("[Unit] %s = %q, want exactly %q", k, got, v)
		}
	}
	// Each of these gives the service a private mount namespace, where remounts and
	// unmounts would not reach the host (FIELD-NOTES, systemd and packaging).
	for _, k := range []string{
		"ProtectSystem", "ProtectHome", "PrivateTmp", "ReadWritePaths", "ReadOnlyPaths",
		"InaccessiblePaths", "TemporaryFileSystem", "BindPaths", "BindReadOnlyPaths",
		"PrivateDevices", "PrivateMounts", "ProtectKernelTunables", "ProtectKernelModules",
		"ProtectKernelLogs", "ProtectControlGroups", "ProtectProc", "ProcSubset", "RootDirectory",
		"RootImage", "MountAPIVFS", "PrivateNetwork", "PrivateUsers", "DynamicUser",
	} {
		if v, ok := u["Service"][k]; ok {
			t.Errorf("[Service] %s=%q makes a private mount namespace; sandboxd must see the host's mounts", k, v)
		}
	}
	for k, why := range map[string]string{
		"ProtectClock":           "on systemd < 253 its device allow-list can deny /dev/fuse to a remount command (EPERM)",
		"DevicePolicy":           "remount commands open /dev/fuse and mount block devices",
		"RestrictSUIDSGID":       "systemd then fails openat2 with ENOSYS (its mode is in a struct seccomp cannot read), and safefs walks with openat2",
		"MemoryDenyWriteExecute": "the Node.js of pnpm/npm/yarn prune commands needs W+X memory for its JIT, and children inherit the filter",
	} {
		if v, ok := u["Service"][k]; ok {
			t.Errorf("[Service] %s=%q: %s", k, v, why)
		}
	}
	// A RuntimeDirectory= is removed when the service stops, taking the socket with it,
	// unless it is preserved; the socket unit owns /run/sandboxd instead.
	if _, ok := u["Service"]["RuntimeDirectory"]; ok && !slices.Equal(u["Service"]["RuntimeDirectoryPreserve"], []string{"yes"}) {
		t.Error("RuntimeDirectory= without RuntimeDirectoryPreserve=yes deletes the socket on every stop")
	}
	if !slices.Contains(u["Unit"]["Requires"], "sandboxd.socket") || !slices.Contains(u["Unit"]["After"], "sandboxd.socket") {
		t.Error("the service must require and order after sandboxd.socket")
	}
}

// TestBootUnit: the early boot check (issue 22) runs before anything writes to the watched
// filesystems and after they are mounted read-write, in early boot, and counts 11
// ("booted on the released reserve") as success; nothing requires it, so a failed check
// never stops the boot.
func TestBootUnit(t *testing.T) {
	u := parseUnit(t, "sandboxd-boot.service")
	for k, v := range map[string]string{
		"DefaultDependencies": "no",
		"Conflicts":           "shutdown.target",
	} {
		if got := u["Unit"][k]; !slices.Equal(got, []string{v}) {
			t.Errorf("[Unit] %s = %q, want exactly %q", k, got, v)
		}
	}
	after := strings.Fields(strings.Join(u["Unit"]["After"], " "))
	before := strings.Fields(strings.Join(u["Unit"]["Before"], " "))
	for _, a := range []string{"local-fs.target", "systemd-remount-fs.service"} {
		if !slices.Contains(after, a) {
			t.Errorf("the boot check must run after %s (the filesystems mounted read-write): After=%q", a, after)
		}
	}
	for _, b := range []string{"sysinit.target", "systemd-tmpfiles-setup.service", "systemd-journal-flush.service",
		"systemd-random-seed.service", "sandboxd.service"} {
		if !slices.Contains(before, b) {
			t.Errorf("the boot check must run before %s writes: Before=%q", b, before)
		}
	}
	for k, v := range map[string]string{
		"Type":              "oneshot",
		"ExecStart":         "/usr/bin/sandboxd boot --config /etc/sandboxd/sandboxd.toml",
		"SuccessExitStatus": "11",
	} {
		if got := u["Service"][k]; !slices.Equal(got, []string{v}) {
			t.Errorf("[Service] %s = %q, want exactly %q", k, got, v)
		}
	}
	if got := u["Install"]["WantedBy"]; !slices.Equal(got, []string{"sysinit.target"}) {
		t.Errorf("[Install] WantedBy = %q, want sysinit.target", got)
	}
}

func TestSocketUnit(t *testing.T) {
	u := parseUnit(t, "sandboxd.socket")
	for k, v := range map[string]string{
		"ListenStream":  api.DefaultSocketPath, // CONTRACT §1
		"SocketMode":    "0660",
		"DirectoryMode": "0755",
	} {
		if got := u["Socket"][k]; !slices.Equal(got, []string{v}) {
			t.Errorf("[Socket] %s = %q, want exactly %q", k, got, v)
		}
	}
}

// TestUnitsVerify runs systemd-analyze verify, which exits 0 even for unknown keys and
// misspelt values: any output at all fails the test. Verify also insists that ExecStart's
// binary exists; /usr/bin/sandboxd is not installed here, so the copies under test have
// that one path (and only it) pointed at an executable this test owns.
func TestUnitsVerify(t *testing.T) {
	analyze := testenv.RequireCommand(t, "systemd-analyze")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, name := range []string{"sandboxd.service", "sandboxd.socket", "sandboxd-boot.service"} {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		if name != "sandboxd.socket" {
			const from = "\nExecStart=/usr/bin/sandboxd "
			if strings.Count(text, from) != 1 {
				t.Fatalf("%s: want exactly one line starting %q", name, strings.TrimSpace(from))
			}
			text = strings.Replace(text, from, "\nExecStart="+exe+" ", 1)
			// Only the daemon reloads; the boot check is a one-shot with nothing to reload.
			const reload = "\nExecReload=/usr/bin/sandboxd "
			if want := map[bool]int{true: 1, false: 0}[name == "sandboxd.service"]; strings.Count(text, reload) != want {
				t.Fatalf("%s: want %d lines starting %q", name, want, strings.TrimSpace(reload))
			}
			text = strings.Replace(text, reload, "\nExecReload="+exe+" ", 1)
		}
		// verify runs man for man: links; the page is installed by the package.
		text = strings.Replace(text, "Documentation=man:sandboxd(1) ", "Documentation=", 1)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(analyze, "verify",
		filepath.Join(dir, "sandboxd.socket"), filepath.Join(dir, "sandboxd.service"), filepath.Join(dir, "sandboxd-boot.service"))
	out, err := cmd.CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

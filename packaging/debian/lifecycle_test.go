package debian

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// dpkgRoot is a minimal Debian root made by the test: an empty dpkg database and a
// merged /usr (/lib, /bin and /sbin are symlinks into /usr, as on bookworm).
type dpkgRoot struct {
	t    *testing.T
	root string
}

func newDpkgRoot(t *testing.T) *dpkgRoot {
	t.Helper()
	r := &dpkgRoot{t: t, root: filepath.Join(t.TempDir(), "root")}
	for _, d := range []string{"var/lib/dpkg/info", "var/lib/dpkg/updates", "var/lib/dpkg/triggers", "usr/bin", "usr/lib", "usr/sbin", "etc", "tmp"} {
		if err := os.MkdirAll(filepath.Join(r.root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(r.root, 0o755)
	for _, l := range []string{"lib", "bin", "sbin"} {
		if err := os.Symlink("usr/"+l, filepath.Join(r.root, l)); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"var/lib/dpkg/status", "var/lib/dpkg/available"} {
		os.WriteFile(filepath.Join(r.root, f), nil, 0o644)
	}
	return r
}

// dpkg runs dpkg on the root. Maintainer scripts run outside it with DPKG_ROOT set
// (--force-script-chrootless: the root has no shell or perl of its own), inside a mount
// namespace whose /run is empty, so nothing can reach a systemd of this machine.
// --force-depends: the root has no libc6 package.
func (r *dpkgRoot) dpkg(args ...string) string {
	r.t.Helper()
	// The namespace lets go of other tests' FUSE mounts first (their servers would outlive
	// their unmount while dpkg runs).
	script := testenv.DetachFUSECopies() + "\n" + `mount -t tmpfs sandboxd-test /run && exec "$@"`
	argv := append([]string{"--mount", "--propagation", "private", "sh", "-c", script, "sh", "dpkg",
		"--root=" + r.root, "--force-script-chrootless", "--force-depends", "--log=" + filepath.Join(r.root, "dpkg.log")}, args...)
	out, err := exec.Command("unshare", argv...).CombinedOutput()
	if err != nil {
		r.t.Fatalf("dpkg %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func (r *dpkgRoot) path(p string) string { return filepath.Join(r.root, p) }

func (r *dpkgRoot) exists(p string) bool {
	_, err := os.Lstat(r.path(p))
	return err == nil
}

func (r *dpkgRoot) want(present bool, paths ...string) {
	r.t.Helper()
	for _, p := range paths {
		if r.exists(p) != present {
			if present {
				r.t.Errorf("%s is missing", p)
			} else {
				r.t.Errorf("%s is still there", p)
			}
		}
	}
}

const (
	wantsService = "etc/systemd/system/multi-user.target.wants/sandboxd.service"
	wantsSocket  = "etc/systemd/system/sockets.target.wants/sandboxd.socket"
)

// oldLayout rebuilds deb as version 0.0.1 with its units under /lib/systemd/system,
// where the packages before this one had them.
func oldLayout(t *testing.T, deb string) string {
	t.Helper()
	x := filepath.Join(t.TempDir(), "x")
	run(t, "dpkg-deb", "-R", deb, x)
	os.MkdirAll(filepath.Join(x, "lib/systemd"), 0o755)
	if err := os.Rename(filepath.Join(x, "usr/lib/systemd/system"), filepath.Join(x, "lib/systemd/system")); err != nil {
		t.Fatal(err)
	}
	ctl := filepath.Join(x, "DEBIAN/control")
	b, _ := os.ReadFile(ctl)
	os.WriteFile(ctl, []byte(strings.Replace(string(b), "Version: "+v1, "Version: 0.0.1", 1)), 0o644)
	os.Remove(filepath.Join(x, "DEBIAN/md5sums"))
	out := filepath.Join(t.TempDir(), "sandboxd_0.0.1_old.deb")
	run(t, "dpkg-deb", "--root-owner-group", "--build", x, out)
	return out
}

// TestLifecycleInRoot: install in a root with no running systemd (an image build)
// enables both units; an upgrade that moves the units from /lib to /usr/lib keeps
// them; an administrator's disable survives an upgrade, as do their config edits;
// remove keeps the config and the state; purge removes both and the enablement state.
func TestLifecycleInRoot(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommand(t, "unshare")
	systemctl := testenv.RequireCommand(t, "systemctl")
	pkgs := packages(t)
	r := newDpkgRoot(t)

	r.dpkg("-i", oldLayout(t, pkgs[v1]))
	r.want(true, "usr/bin/sandboxd", "lib/systemd/system/sandboxd.service", wantsService, wantsSocket)

	r.dpkg("-i", pkgs[v1])
	r.want(true, "usr/lib/systemd/system/sandboxd.service", "usr/lib/systemd/system/sandboxd.socket", wantsService, wantsSocket)
	if fi, _ := os.Stat(r.root); fi.Mode().Perm() != 0o755 {
		t.Errorf("install left the root at %v", fi.Mode().Perm())
	}

	// The administrator disables the service and edits the config.
	if out, err := exec.Command(systemctl, "--root="+r.root, "disable", "sandboxd.service", "sandboxd.socket").CombinedOutput(); err != nil {
		t.Fatalf("systemctl disable: %v\n%s", err, out)
	}
	r.want(false, wantsService, wantsSocket)
	conf := r.path("etc/sandboxd/sandboxd.toml")
	f, _ := os.OpenFile(conf, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("# edited by the administrator\n")
	f.Close()
	os.MkdirAll(r.path("var/lib/sandboxd"), 0o700)
	os.WriteFile(r.path("var/lib/sandboxd/reclaim.json"), []byte("{}"), 0o600)
	os.MkdirAll(r.path("var/lib/prometheus/node-exporter"), 0o755)
	os.WriteFile(r.path("var/lib/prometheus/node-exporter/sandboxd.prom"), []byte("sandboxd_build_info 1\n"), 0o644)

	r.dpkg("-i", pkgs[v2])
	r.want(false, wantsService, wantsSocket) // stays disabled
	if b, _ := os.ReadFile(conf); !strings.Contains(string(b), "# edited by the administrator") {
		t.Error("the upgrade replaced the administrator's config")
	}
	if st := r.dpkg("-s", "sandboxd"); !strings.Contains(st, "Version: "+v2) {
		t.Errorf("after the upgrade:\n%s", st)
	}

	r.dpkg("--remove", "sandboxd")
	r.want(false, "usr/bin/sandboxd", "usr/lib/systemd/system/sandboxd.service", "var/lib/prometheus/node-exporter/sandboxd.prom")
	r.want(true, "etc/sandboxd/sandboxd.toml", "etc/default/sandboxd", "var/lib/sandboxd/reclaim.json")

	r.dpkg("--purge", "sandboxd")
	r.want(false, "etc/sandboxd", "etc/default/sandboxd", "var/lib/sandboxd", wantsService, wantsSocket)
	left, _ := filepath.Glob(r.path("var/lib/systemd/deb-systemd-helper-enabled/*sandboxd*"))
	left2, _ := filepath.Glob(r.path("var/lib/systemd/deb-systemd-helper-enabled/*/*sandboxd*"))
	if len(left)+len(left2) > 0 {
		t.Errorf("purge left deb-systemd-helper state: %v %v", left, left2)
	}
}

package daemon

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/safefs"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// asNobody runs a command as uid 65534, the attacker of the issue 9 tests.
func asNobody(t *testing.T, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %v as uid 65534: %v %s", name, args, err, out)
	}
}

// sharedTmp is a fresh tmpfs with a root-owned sticky world-writable directory in it,
// as /tmp is, and a root-owned victim directory holding a file another user wants gone.
func sharedTmp(t *testing.T) (shared, victim, precious string) {
	t.Helper()
	T := testenv.Tmpfs(t, 4<<20, 0)
	shared = filepath.Join(T, "shared")
	os.Mkdir(shared, 0o755)
	unix.Chmod(shared, 0o1777) // os.Chmod would drop the sticky bit (it is os.ModeSticky there)
	victim = filepath.Join(T, "victim")
	os.Mkdir(victim, 0o755)
	precious = filepath.Join(victim, "sandboxd.prom")
	os.WriteFile(precious, []byte("root's own file\n"), 0o644)
	return shared, victim, precious
}

func unchanged(t *testing.T, path, want string) {
	t.Helper()
	fi, err := os.Lstat(path)
	b, _ := os.ReadFile(path)
	if err != nil || !fi.Mode().IsRegular() || string(b) != want {
		t.Errorf("%s was changed by the daemon: %v %v %q", path, fi, err, b)
	}
	ents, _ := os.ReadDir(filepath.Dir(path))
	if len(ents) != 1 {
		t.Errorf("the daemon left entries in %s: %v", filepath.Dir(path), ents)
	}
}

// The textfile's directory reached through a symlink another user made in a sticky
// shared dir: neither the write (temp file + rename over) nor the removal of the old
// path touches the directory the link points to, and the error names the link.
func TestTextfileNeverThroughASymlinkedParent(t *testing.T) {
	shared, victim, precious := sharedTmp(t)
	asNobody(t, "ln", "-s", victim, filepath.Join(shared, "metrics"))
	path := filepath.Join(shared, "metrics", "sandboxd.prom")
	_, err := writeTextfile(path, prometheus.NewRegistry())
	if !errors.Is(err, safefs.ErrUnsafeRoot) || !strings.Contains(err.Error(), "is a symlink") {
		t.Errorf("write through a symlinked parent: %v, want a refusal naming the link", err)
	}
	err = removeTextfile(path)
	if !errors.Is(err, safefs.ErrUnsafeRoot) {
		t.Errorf("removal through a symlinked parent: %v, want a refusal", err)
	}
	unchanged(t, precious, "root's own file\n")
}

// A world-writable directory without the sticky bit above the textfile's: any user could
// swap what lies beneath it, so nothing is written or removed there.
func TestTextfileRefusesAWorldWritableNonStickyParent(t *testing.T) {
	shared, _, _ := sharedTmp(t)
	open := filepath.Join(shared, "open")
	os.Mkdir(open, 0o755)
	os.Chmod(open, 0o777)
	dir := filepath.Join(open, "metrics")
	os.Mkdir(dir, 0o755)
	path := filepath.Join(dir, "sandboxd.prom")
	os.WriteFile(path, []byte("old\n"), 0o644)
	_, err := writeTextfile(path, prometheus.NewRegistry())
	if !errors.Is(err, safefs.ErrUnsafeRoot) || !strings.Contains(err.Error(), "world-writable") {
		t.Errorf("write below a world-writable non-sticky dir: %v, want a refusal saying so", err)
	}
	if err := removeTextfile(path); !errors.Is(err, safefs.ErrUnsafeRoot) {
		t.Errorf("removal below a world-writable non-sticky dir: %v, want a refusal", err)
	}
	unchanged(t, path, "old\n")
}

// The attacker owns the textfile's directory (allowed: it is theirs) and swaps it for a
// symlink to the victim's directory after the daemon wrote there: the next write and the
// removal of the old path (a reload turned the textfile off) leave the victim alone; the
// attacker's own directory, moved aside, is where the file was, and only it changed.
func TestTextfileSwappedParent(t *testing.T) {
	shared, victim, precious := sharedTmp(t)
	dir := filepath.Join(shared, "metrics")
	asNobody(t, "mkdir", dir)
	path := filepath.Join(dir, "sandboxd.prom")
	if _, err := writeTextfile(path, prometheus.NewRegistry()); err != nil {
		t.Fatalf("write in a directory the attacker owns (its owner's business): %v", err)
	}
	asNobody(t, "mv", dir, filepath.Join(shared, "moved"))
	asNobody(t, "ln", "-s", victim, dir)
	if _, err := writeTextfile(path, prometheus.NewRegistry()); !errors.Is(err, safefs.ErrUnsafeRoot) {
		t.Errorf("write after the swap: %v, want a refusal", err)
	}
	if err := removeTextfile(path); !errors.Is(err, safefs.ErrUnsafeRoot) {
		t.Errorf("removal after the swap: %v, want a refusal", err)
	}
	unchanged(t, precious, "root's own file\n")
	if _, err := os.Stat(filepath.Join(shared, "moved", "sandboxd.prom")); err != nil {
		t.Errorf("the file written before the swap: %v", err)
	}
	// A link planted at the file's own name is replaced as a link, never followed.
	asNobody(t, "rm", dir)
	asNobody(t, "mv", filepath.Join(shared, "moved"), dir)
	asNobody(t, "ln", "-sf", precious, path)
	if _, err := writeTextfile(path, prometheus.NewRegistry()); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(path); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("the planted link was not replaced by the textfile: %v %v", fi, err)
	}
	asNobody(t, "ln", "-sf", precious, path)
	if err := removeTextfile(path); !errors.Is(err, safefs.ErrNotRegular) {
		t.Errorf("removing a planted link: %v, want it left alone (not a regular file)", err)
	}
	unchanged(t, precious, "root's own file\n")
}

// Debian's layout: prometheus-node-exporter's textfile directory /var/lib/prometheus/
// node-exporter is root's, inside /var/lib/prometheus, owned by the prometheus user. The
// write goes there (one other user's ancestor only lets that user redirect it into their
// own tree); the removal of an old path, a deletion, keeps the strict rule and is refused.
func TestTextfileInDebiansLayout(t *testing.T) {
	T := testenv.Tmpfs(t, 4<<20, 0)
	owned := filepath.Join(T, "prometheus")
	os.Mkdir(owned, 0o755)
	os.Chown(owned, 65534, 65534)
	dir := filepath.Join(owned, "node-exporter")
	os.Mkdir(dir, 0o755)
	path := filepath.Join(dir, "sandboxd.prom")
	if ok, err := writeTextfile(path, prometheus.NewRegistry()); !ok || err != nil {
		t.Fatalf("write in Debian's textfile directory: %v %v", ok, err)
	}
	if fi, err := os.Lstat(path); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o644 {
		t.Errorf("textfile: %v %v", fi, err)
	}
	if err := removeTextfile(path); !errors.Is(err, safefs.ErrUnsafeRoot) {
		t.Errorf("removal below another user's directory: %v, want the strict rule's refusal", err)
	}
}

// failingCollector stands for a collector whose source is gone (an error metric).
type failingCollector struct{}

var descFailing = prometheus.NewDesc("sandboxd_test_failing", "fails", nil, nil)

func (failingCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descFailing }
func (failingCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.NewInvalidMetric(descFailing, errors.New("source unreadable"))
}

// One collector's failure costs only its own series, as on /metrics: the file is still
// written, and the error is reported.
func TestTextfileKeepsTheSeriesThatGathered(t *testing.T) {
	reg := prometheus.NewRegistry()
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "sandboxd_test_ok", Help: "ok"})
	g.Set(1)
	reg.MustRegister(g, failingCollector{})
	path := filepath.Join(t.TempDir(), "sandboxd.prom")
	ok, err := writeTextfile(path, reg)
	if !ok || err == nil || !strings.Contains(err.Error(), "source unreadable") {
		t.Fatalf("writeTextfile = %v, %v; want written, with the collector's error", ok, err)
	}
	if b, _ := os.ReadFile(path); !strings.Contains(string(b), "sandboxd_test_ok 1") {
		t.Errorf("textfile lacks the series that gathered:\n%s", b)
	}
}

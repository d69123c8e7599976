// Package debian builds sandboxd's Debian package (build.sh, with the debhelper tools);
// its tests build it, run lintian on it, and install, disable, upgrade, remove and purge
// it in a root of their own with dpkg --root.
package debian

import (
	"bytes"
	"compress/gzip"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/sandboxd/sandboxd/internal/fusetest"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

var (
	debsOnce sync.Once
	debsDir  string
	debs     map[string]string // version -> .deb path
	debsErr  error
)

// The versions the tests build: an upgrade goes from the first to the second.
const (
	v1 = "0.1.20261201+gaaaaaaa"
	v2 = "0.2.20261202+gbbbbbbb"
)

func TestMain(m *testing.M) {
	fusetest.Main() // the FUSE server roles, re-executed by TestPackageUnderSystemd
	code := m.Run()
	if debsDir != "" {
		os.RemoveAll(debsDir)
	}
	os.Exit(code)
}

// packages builds v1 and v2 once for every test of the package.
func packages(t *testing.T) map[string]string {
	t.Helper()
	for _, c := range []string{"dpkg-deb", "dh_installsystemd", "go"} {
		testenv.RequireCommand(t, c)
	}
	debsOnce.Do(func() {
		debsDir, debsErr = os.MkdirTemp("", "sandboxd-deb-")
		if debsErr != nil {
			return
		}
		debs = map[string]string{}
		for _, v := range []string{v1, v2} {
			cmd := exec.Command("bash", "build.sh", filepath.Join(debsDir, v))
			cmd.Env = append(os.Environ(), "DEB_VERSION="+v)
			out, err := cmd.Output()
			if err != nil {
				var stderr []byte
				if ee, ok := err.(*exec.ExitError); ok {
					stderr = ee.Stderr
				}
				debsErr = fmt.Errorf("build.sh %s: %v\n%s%s", v, err, out, stderr)
				return
			}
			debs[v] = strings.TrimSpace(string(out))
		}
	})
	if debsErr != nil {
		t.Fatal(debsErr)
	}
	return debs
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestLintian: lintian -I -E --pedantic reports no error and no warning, and every
// override the package ships says why in a comment.
func TestLintian(t *testing.T) {
	lintian := testenv.RequireCommand(t, "lintian")
	deb := packages(t)[v1]
	cmd := exec.Command(lintian, "-I", "-E", "--pedantic", deb)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout // stderr: "running with root privileges is not recommended!"
	if err := cmd.Run(); err != nil {
		t.Fatalf("lintian: %v\n%s", err, stdout.String())
	}
	for _, l := range strings.Split(stdout.String(), "\n") {
		if strings.HasPrefix(l, "E: ") || strings.HasPrefix(l, "W: ") {
			t.Errorf("lintian: %s", l)
		}
	}
	t.Logf("lintian -I -E --pedantic:\n%s", stdout.String())
	b, err := os.ReadFile("sandboxd.lintian-overrides")
	if err != nil {
		t.Fatal(err)
	}
	commented := false
	for _, l := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(l, "#"):
			commented = true
		case strings.TrimSpace(l) == "":
			commented = false
		case !commented:
			t.Errorf("lintian override %q has no comment saying why", l)
		}
	}
}

// TestPackageContents: what the package holds and how its binary is built.
func TestPackageContents(t *testing.T) {
	deb := packages(t)[v1]
	info := run(t, "dpkg-deb", "--info", deb)
	for _, want := range []string{"Package: sandboxd", "Version: " + v1, "Depends: libc6 (>= "} {
		if !strings.Contains(info, want) {
			t.Errorf("control lacks %q:\n%s", want, info)
		}
	}
	conffiles := run(t, "dpkg-deb", "--info", deb, "conffiles")
	for _, want := range []string{"/etc/sandboxd/sandboxd.toml", "/etc/default/sandboxd"} {
		if !strings.Contains(conffiles, want) {
			t.Errorf("conffiles lack %s:\n%s", want, conffiles)
		}
	}
	contents := run(t, "dpkg-deb", "--contents", deb)
	for _, want := range []string{
		"drwxr-xr-x root/root         0 ", // the root entry, checked below by name
		"./usr/bin/sandboxd", "./usr/lib/systemd/system/sandboxd.service", "./usr/lib/systemd/system/sandboxd.socket",
		"./usr/lib/systemd/system/sandboxd-boot.service",
		"./usr/share/man/man1/sandboxd.1.gz", "./usr/share/doc/sandboxd/copyright", "./usr/share/doc/sandboxd/changelog.gz",
		"./usr/share/sandboxd/prometheus/sandboxd-alerts.yml", "./usr/share/sandboxd/grafana/sandboxd.json",
	} {
		if !strings.Contains(contents, want) {
			t.Errorf("package contents lack %q:\n%s", want, contents)
		}
	}
	if !regexp.MustCompile(`(?m)^drwxr-xr-x root/root\s+0 \S+ \S+ \./$`).MatchString(contents) {
		t.Errorf("the root entry is not 0755 root/root (dpkg-deb -x gives the target its mode):\n%s", contents)
	}
	if strings.Contains(contents, " ./lib/") {
		t.Errorf("files under /lib; units belong in /usr/lib/systemd/system:\n%s", contents)
	}

	x := t.TempDir()
	run(t, "dpkg-deb", "-x", deb, x)
	if fi, _ := os.Stat(x); fi.Mode().Perm() != 0o755 {
		t.Errorf("dpkg-deb -x left the target at %v", fi.Mode().Perm())
	}
	bin := filepath.Join(x, "usr/bin/sandboxd")
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Type != elf.ET_DYN {
		t.Errorf("binary is %v, want a PIE (ET_DYN)", f.Type)
	}
	if f.Section(".symtab") != nil || f.Section(".debug_info") != nil {
		t.Error("binary is not stripped: it has .symtab or .debug_info")
	}
	relro := false
	for _, p := range f.Progs {
		relro = relro || p.Type == elf.PT_GNU_RELRO
	}
	flags, _ := f.DynValue(elf.DT_FLAGS)
	if !relro || len(flags) == 0 || flags[0]&uint64(elf.DF_BIND_NOW) == 0 {
		t.Errorf("binary lacks full RELRO (PT_GNU_RELRO %v, DT_FLAGS %v)", relro, flags)
	}

	// The alert rules' runbook links name the installed version's docs (the commit these
	// packages were built from; a tag for a tagged release), never main (issue 25).
	rules, _ := os.ReadFile(filepath.Join(x, "usr/share/sandboxd/prometheus/sandboxd-alerts.yml"))
	links := regexp.MustCompile(`runbook_url: https://github.com/sandboxd/sandboxd/blob/([^/]+)/docs/operations.md#`).FindAllStringSubmatch(string(rules), -1)
	refs := map[string]bool{}
	for _, l := range links {
		refs[l[1]] = true
	}
	if len(links) < 18 || len(refs) != 1 || strings.Contains(string(rules), "/blob/main/") {
		t.Errorf("%d runbook links, naming %v; want every one naming the build's commit or tag, none main", len(links), refs)
	}
	for ref := range refs {
		if !regexp.MustCompile(`^([0-9a-f]{40}|v[0-9][0-9A-Za-z.+~-]*)$`).MatchString(ref) {
			t.Errorf("runbook links name %q: not a commit or a version tag", ref)
		} else if out, err := exec.Command("git", "cat-file", "-e", ref+"^{commit}").CombinedOutput(); err != nil {
			t.Errorf("runbook links name %s, which is no commit of this repository: %v %s", ref, err, out)
		}
	}

	// The packaged config is the embedded default with exactly mode and textfile changed,
	// and passes config check.
	conf := filepath.Join(x, "etc/sandboxd/sandboxd.toml")
	run(t, bin, "config", "check", conf)
	def := strings.Split(run(t, bin, "config", "default"), "\n")
	got, _ := os.ReadFile(conf)
	lines := strings.Split(string(got), "\n")
	if len(lines) != len(def) {
		t.Fatalf("packaged config has %d lines, the default %d", len(lines), len(def))
	}
	var changed []string
	for i := range lines {
		if lines[i] != def[i] {
			changed = append(changed, strings.Fields(lines[i])[0]+"="+strings.Fields(lines[i])[2])
		}
	}
	want := []string{`mode="observe"`, `textfile="/var/lib/prometheus/node-exporter/sandboxd.prom"`}
	if fmt.Sprint(changed) != fmt.Sprint(want) {
		t.Errorf("packaged config differs from the default in %v, want exactly %v", changed, want)
	}

	// The man page has a section for every command the help lists, holding that
	// command's --help as the binary prints it.
	gz, err := os.Open(filepath.Join(x, "usr/share/man/man1/sandboxd.1.gz"))
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(gz)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(zr)
	gz.Close()
	if man, err := exec.LookPath("man"); err == nil {
		out, err := exec.Command(man, "--warnings", "-l", "-Tutf8", filepath.Join(x, "usr/share/man/man1/sandboxd.1.gz")).CombinedOutput()
		if err != nil {
			t.Errorf("man -l: %v\n%s", err, out)
		}
		page = append(page, out...)
	}
	top := run(t, bin, "--help")
	n := 0
	for _, m := range regexp.MustCompile(`(?m)^  ([a-z][a-z0-9-]*)\s{2,}\S`).FindAllStringSubmatch(top, -1) {
		if m[1] == "help" {
			continue
		}
		n++
		if !strings.Contains(string(page), `.SS "sandboxd `+m[1]+`"`) {
			t.Errorf("man page has no section for %s", m[1])
		}
		usage := strings.SplitN(run(t, bin, m[1], "--help"), "\n", 2)[0]
		if !strings.Contains(string(page), usage) {
			t.Errorf("man page lacks %q", usage)
		}
	}
	if n < 5 {
		t.Errorf("found %d commands in the help:\n%s", n, top)
	}
}

// TestVersionOnlyGoesUp: without a tag the version is 0.<commits>.<date>+g<hash>, so a
// later commit of main always sorts above an earlier one.
func TestVersionOnlyGoesUp(t *testing.T) {
	testenv.RequireCommand(t, "git")
	count, err := exec.Command("git", "rev-list", "--count", "HEAD").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	cmd := exec.Command("bash", "build.sh", "--version")
	cmd.Env = append(os.Environ(), "DEB_VERSION=")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	v := strings.TrimSpace(string(out))
	if tagged, _ := exec.Command("git", "describe", "--tags", "--exact-match").Output(); len(tagged) > 0 {
		return
	}
	m := regexp.MustCompile(`^0\.(\d+)\.(\d{8})\+g[0-9a-f]{7}$`).FindStringSubmatch(v)
	if m == nil || m[1] != strings.TrimSpace(string(count)) {
		t.Fatalf("version %q; want 0.%s.<date>+g<hash>", v, strings.TrimSpace(string(count)))
	}
	older := fmt.Sprintf("0.%d.99991231+gfffffff", atoi(m[1])-1)
	if err := exec.Command("dpkg", "--compare-versions", v, "gt", older).Run(); err != nil {
		t.Errorf("%s does not sort above the previous commit's %s", v, older)
	}
}

func atoi(s string) int {
	n := 0
	fmt.Sscan(s, &n)
	return n
}

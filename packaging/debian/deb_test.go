// Package debian builds sandboxd's Debian package; its test builds one and checks what
// it holds.
package debian

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

func TestDebianPackage(t *testing.T) {
	testenv.RequireCommand(t, "dpkg-deb")
	top, _ := filepath.Abs("../..")
	bin := filepath.Join(t.TempDir(), "bin")
	os.MkdirAll(bin, 0o755)
	// build.sh reads <top>/bin/sandboxd: build into a copy of the layout it expects.
	work := t.TempDir()
	for _, d := range []string{"packaging", "docs", "README.md"} {
		if out, err := exec.Command("cp", "-a", filepath.Join(top, d), work).CombinedOutput(); err != nil {
			t.Fatalf("copy %s: %v %s", d, err, out)
		}
	}
	os.MkdirAll(filepath.Join(work, "bin"), 0o755)
	build := exec.Command("go", "build", "-o", filepath.Join(work, "bin", "sandboxd"), "./cmd/sandboxd")
	build.Dir = top
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command("bash", filepath.Join(work, "packaging/debian/build.sh")).CombinedOutput()
	if err != nil {
		t.Fatalf("build.sh: %v\n%s", err, out)
	}
	deb := strings.TrimSpace(string(out))
	info, err := exec.Command("dpkg-deb", "--info", deb).CombinedOutput()
	if err != nil {
		t.Fatalf("dpkg-deb --info: %v\n%s", err, info)
	}
	for _, want := range []string{"Package: sandboxd", "conffiles", "postinst", "Depends: systemd"} {
		if !strings.Contains(string(info), want) {
			t.Errorf("package info lacks %q:\n%s", want, info)
		}
	}
	contents, _ := exec.Command("dpkg-deb", "--contents", deb).CombinedOutput()
	for _, want := range []string{"./usr/bin/sandboxd", "./lib/systemd/system/sandboxd.service", "./lib/systemd/system/sandboxd.socket",
		"./etc/sandboxd/sandboxd.toml", "root/root"} {
		if !strings.Contains(string(contents), want) {
			t.Errorf("package contents lack %q:\n%s", want, contents)
		}
	}
	// The shipped config is the embedded default and passes config check.
	x := t.TempDir()
	if out, err := exec.Command("dpkg-deb", "-x", deb, x).CombinedOutput(); err != nil {
		t.Fatalf("extract: %v %s", err, out)
	}
	if out, err := exec.Command(filepath.Join(x, "usr/bin/sandboxd"), "config", "check", filepath.Join(x, "etc/sandboxd/sandboxd.toml")).CombinedOutput(); err != nil {
		t.Fatalf("shipped config: %v %s", err, out)
	}
}

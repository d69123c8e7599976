package daemon

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestOpenAPIDescribesEveryRoute fails when a route of the server is missing from
// docs/openapi.yaml (path at two spaces, method at four).
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	f, err := os.Open("../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	described := map[string]bool{}
	inPaths, path := false, ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "paths:":
			inPaths = true
		case inPaths && len(line) > 0 && line[0] != ' ':
			inPaths = false
		case inPaths && strings.HasPrefix(line, "  /") && strings.HasSuffix(line, ":"):
			path = strings.TrimSuffix(strings.TrimSpace(line), ":")
		case inPaths && strings.HasPrefix(line, "    ") && !strings.HasPrefix(line, "     ") && path != "":
			m := strings.TrimSuffix(strings.TrimSpace(line), ":")
			described[strings.ToUpper(m)+" "+path] = true
		}
	}
	d := &Daemon{}
	for _, r := range d.Routes() {
		if !described[r] {
			t.Errorf("route %q is not described in docs/openapi.yaml", r)
		}
	}
	if len(described) != len(d.Routes()) {
		t.Errorf("openapi describes %d operations, the server has %d routes", len(described), len(d.Routes()))
	}
}

// TestDependencyDirection keeps STYLE's layering: api and client import no Prometheus,
// procfs, fsnotify or go-systemd; client imports only api of this module; nothing but
// cmd imports daemon.
func TestDependencyDirection(t *testing.T) {
	deps := func(pkg string) []string {
		out, err := exec.Command("go", "list", "-deps", pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		return strings.Fields(string(out))
	}
	banned := []string{"github.com/prometheus/", "github.com/fsnotify/", "github.com/coreos/go-systemd", "github.com/hanwen/go-fuse"}
	for _, pkg := range []string{"github.com/sandboxd/sandboxd/api", "github.com/sandboxd/sandboxd/client"} {
		for _, d := range deps(pkg) {
			for _, b := range banned {
				if strings.HasPrefix(d, b) {
					t.Errorf("%s depends on %s", pkg, d)
				}
			}
			if strings.HasPrefix(d, "github.com/sandboxd/sandboxd/") && d != pkg && d != "github.com/sandboxd/sandboxd/api" {
				t.Errorf("%s depends on %s (only api is allowed)", pkg, d)
			}
		}
	}
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "github.com/sandboxd/sandboxd/...").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		for _, imp := range f[1:] {
			if imp == "github.com/sandboxd/sandboxd/daemon" && !strings.HasPrefix(f[0], "github.com/sandboxd/sandboxd/cmd/") {
				t.Errorf("%s imports daemon; only cmd may", f[0])
			}
		}
	}
}

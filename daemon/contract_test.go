package daemon

import (
	"bufio"
	"os"
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

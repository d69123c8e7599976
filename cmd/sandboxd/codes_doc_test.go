package main

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/api"
)

// TestErrorTableMatchesCodes: every error code the daemon can answer has its row in
// docs/api.md's table with the HTTP status and the CLI exit status the code carries, and
// is in docs/openapi.yaml's enum, so the exit table cannot drift from what the CLI does.
func TestErrorTableMatchesCodes(t *testing.T) {
	md, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	oa, err := os.ReadFile("../../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var enum string
	for _, l := range strings.Split(string(oa), "\n") {
		if strings.Contains(l, "enum: [bad_request,") {
			enum = l
		}
	}
	for _, c := range api.Codes {
		row := fmt.Sprintf("| `%s` | %d | %d |", c, c.Status(), c.ExitCode())
		if !strings.Contains(string(md), row) {
			t.Errorf("docs/api.md has no row %q", row)
		}
		if !strings.Contains(enum, " "+string(c)+",") && !strings.Contains(enum, "["+string(c)+",") && !strings.Contains(enum, " "+string(c)+"]") {
			t.Errorf("docs/openapi.yaml's code enum lacks %s: %s", c, enum)
		}
	}
}

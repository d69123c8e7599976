package config

import (
	"errors"
	"strings"
	"testing"
)

// problemsOf parses src and returns its problems, failing when it is accepted.
func problemsOf(t *testing.T, src string) []Problem {
	t.Helper()
	_, err := Parse([]byte(src), "t.toml")
	if err == nil {
		t.Fatalf("config accepted, want problems:\n%s", src)
	}
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("error is %T, want *ValidationError: %v", err, err)
	}
	return ve.Problems
}

// lineOf is the 1-based line of the first occurrence of marker in src.
func lineOf(t *testing.T, src, marker string) int {
	t.Helper()
	i := strings.Index(src, marker)
	if i < 0 {
		t.Fatalf("marker %q not in source", marker)
	}
	// A marker may start with newlines to anchor it at the start of a line.
	i += len(marker) - len(strings.TrimLeft(marker, "\n"))
	return strings.Count(src[:i], "\n") + 1
}

// wantProblem asserts that src has a problem about key on the line of marker whose
// message contains every piece of contains.
func wantProblem(t *testing.T, src, key, marker string, contains ...string) {
	t.Helper()
	line := 0
	if marker != "" {
		line = lineOf(t, src, marker)
	}
	ps := problemsOf(t, src)
	for _, p := range ps {
		if p.Key != key {
			continue
		}
		if p.Line != line {
			t.Errorf("problem %q is on line %d, want %d", p.Error(), p.Line, line)
		}
		for _, c := range contains {
			if !strings.Contains(p.Msg, c) {
				t.Errorf("problem %q does not mention %q", p.Error(), c)
			}
		}
		return
	}
	t.Errorf("no problem about %s; got:\n%v", key, &ValidationError{Problems: ps})
}

func mustParse(t *testing.T, src string) *Config {
	t.Helper()
	c, err := Parse([]byte(src), "t.toml")
	if err != nil {
		t.Fatalf("parse:\n%v\nsource:\n%s", err, src)
	}
	return c
}

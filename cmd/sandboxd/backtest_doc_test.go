package main

import (
	"os"
	"strings"
	"testing"
)

// docs/operations.md's backtest example is what the command prints, run from the
// repository's root on the recorded series it names.
func TestOperationsBacktestExample(t *testing.T) {
	b, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(b), "```console\n$ sandboxd backtest ")
	if !ok {
		t.Fatal("docs/operations.md has no `sandboxd backtest` console example")
	}
	block, _, _ = strings.Cut(block, "```")
	cmdline, want, _ := strings.Cut(block, "\n")
	args := append([]string{"backtest"}, strings.Fields(cmdline)...)
	for i, a := range args {
		if strings.HasPrefix(a, "backtest/") {
			args[i] = "../../" + a
		}
	}
	r := sandboxd(t, nil, args...)
	if r.code != 0 || r.stdout != want {
		t.Fatalf("sandboxd %s: exit %d; the docs show\n%s\nit prints\n%s%s", strings.Join(args, " "), r.code, want, r.stdout, r.stderr)
	}
}

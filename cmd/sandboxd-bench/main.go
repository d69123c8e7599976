// Command sandboxd-bench is the helper behind `make bench` (scripts/bench.sh): an HTTP
// load client for Unix sockets, a bare net/http server to compare sandboxd against, file
// generators for write-site benchmarks, an idle-cost sampler reading /proc, and the
// report that turns the raw JSON lines into the summary table. Every measurement runs in
// its own process, so the load client never shares a Go runtime with what it measures.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"load", "drive one endpoint over a Unix socket; print one JSON result line", runLoad},
		{"bare", "serve a constant small JSON on a Unix socket until SIGTERM", runBare},
		{"get", "print the body of a GET; with -wait, poll until it answers 200", runGet},
		{"fill", "create N site entries in jobs of 7 with fresh mtimes", runFill},
		{"churn", "create entries at a steady rate until SIGTERM", runChurn},
		{"idle", "sample a process's RSS and CPU from /proc over a duration", runIdle},
		{"time", "run a command after -- and print its wall time as a result line", runTimeCmd},
		{"drain", "start the daemon after -- on a site of expired files; time it until they are gone", runDrain},
		{"report", "read raw JSON result lines, print the summary table and verdicts", runReport},
		{"ratio", "per-round ratio of two targets of one test, and its median", runRatio},
		{"spawn", "start the command after -- as a child, wait for it, exit (the physical cost beside sandboxd run)", runSpawn},
	}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 64
	}
	for _, c := range commands() {
		if c.name == args[0] {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if err := c.run(ctx, args[1:], stdout, stderr); err != nil {
				fmt.Fprintf(stderr, "sandboxd-bench %s: %v\n", c.name, err)
				return 1
			}
			return 0
		}
	}
	usage(stderr)
	return 64
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: sandboxd-bench COMMAND [flags]")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-7s %s\n", c.name, c.summary)
	}
}

func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

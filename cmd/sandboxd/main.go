// Command sandboxd is the node-local self-healing daemon for persistent sandboxes and CI
// runners, and its command-line client: `sandboxd serve` runs the daemon; the other
// subcommands talk to it over its Unix socket (CONTRACT §9).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/sandboxd/sandboxd/mountwatch"
)

// Set by the build (-ldflags -X).
var (
	version = "dev"
	commit  = "unknown"
)

// Exit statuses shared by every client command (CONTRACT §3, §9).
const (
	exitOK          = 0
	exitUsage       = 64
	exitUnreachable = 69
	exitSoftware    = 70
	exitConfig      = 78
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

func commands() []command {
	return []command{
		{"serve", "run the daemon (the default with no subcommand)", runServe},
		{"status", "a person's view of filesystems, sites, mounts and conditions", runStatus},
		{"launch", "the write-site call, for shell launchers", runLaunch},
		{"resume", "the resume hook: self-heal and print the verdict", runResume},
		{"reclaim", "reclaim now, or show the plan with --dry-run", runReclaim},
		{"events", "the audit trail (--follow to keep printing)", runEvents},
		{"check", "health for monitoring (Nagios plugin convention)", runCheck},
		{"config", "config default | config check FILE | config show", runConfig},
		{"version", "version, commit and Go version", runVersion},
	}
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "mount-probe" {
		// Hidden: the child process that probes one FUSE mount for the daemon.
		return mountwatch.ProbeMain(args[1:], stdout)
	}
	name := "serve"
	if len(args) > 0 && (len(args[0]) == 0 || args[0][0] != '-') {
		name, args = args[0], args[1:]
	}
	if name == "help" || name == "-h" || name == "--help" {
		usage(stdout)
		return exitOK
	}
	for _, c := range commands() {
		if c.name == name {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return c.run(ctx, args, stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "sandboxd: unknown command %q\n\n", name)
	usage(stderr)
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: sandboxd [command] [flags]")
	fmt.Fprintln(w, "\ncommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nclient commands take --socket PATH (env SANDBOXD_SOCKET), --json and --timeout DURATION.")
	fmt.Fprintln(w, "run 'sandboxd COMMAND -h' for a command's flags.")
}

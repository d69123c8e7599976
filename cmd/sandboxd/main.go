// Command sandboxd is the node-local self-healing daemon for persistent sandboxes and CI
// runners, and its command-line client: `sandboxd serve` runs the daemon; the other
// commands talk to it over its Unix socket (CONTRACT §9). Bare `sandboxd` prints the help.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/sandboxd/sandboxd/api"
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

// commands is the command table: one entry per command, each defined in its own file
// (statusCommand in status.go, ...). Help, global flags before or after the command,
// "did you mean" and exit 64 for usage errors come with the entry (cli.go, help.go). A
// command with subcommands lists them in subs (deflt names the one run when none is
// given); positional arguments are bounded by minArgs/maxArgs; rawArgs passes everything
// after the first argument on untouched (a command to run). table_test.go has a jobs- and
// run-shaped example.
func commands() []*command {
	return []*command{
		serveCommand(),
		statusCommand(),
		launchCommand(),
		resumeCommand(),
		reclaimCommand(),
		reserveCommand(),
		bootCommand(),
		imageCommand(),
		eventsCommand(),
		checkCommand(),
		backtestCommand(),
		configCommand(),
		mountsCommand(),
		runCommand(),
		releaseAllCommand(),
		jobsCommand(),
		versionCommand(),
		helpCommand(),
	}
}

func rootCommand() *command {
	return &command{name: "sandboxd", summary: "the node-local, self-healing daemon for persistent sandboxes and CI runners",
		subs: commands()}
}

// run parses the command line, descending the command table: global flags may stand
// before or after the command; the leaf's own flags anywhere after its name.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "mount-probe" {
		// Hidden: the child process that probes one FUSE mount for the daemon.
		return mountwatch.ProbeMain(args[1:], stdout)
	}
	return dispatch(rootCommand(), args, stdout, stderr)
}

// dispatch runs the command of root's table that args name.
func dispatch(root *command, args []string, stdout, stderr io.Writer) int {
	g := &globals{}
	cmd, full := root, root.name
	for len(cmd.subs) > 0 {
		fs := flagSetFor(full, g, cmd == root)
		r, err := parseLevel(fs, args, true)
		if err != nil {
			msg := err.Error()
			// A command's own flag before the command: say whose it is and where it goes.
			var uf *unknownFlagError
			if errors.As(err, &uf) && uf.suggestion == "" {
				if owners := ownerOf(cmd, full, uf.name); len(owners) > 0 {
					msg += fmt.Sprintf(" here: it is a flag of %s; put it after the command (%s --%s ...)",
						strings.Join(owners, ", "), owners[0], uf.name)
				}
			}
			return usageError(stderr, full, msg)
		}
		switch {
		case r.version:
			return versionCommand().run(context.Background(), &invocation{name: "sandboxd version", g: g, stdout: stdout, stderr: stderr})
		case r.help:
			// `sandboxd --help launch` is launch's help, as with git and kubectl.
			c, f := cmd, full
			for _, a := range r.rest {
				s := c.sub(a)
				if s == nil {
					break
				}
				c, f = s, f+" "+a
			}
			printHelp(stdout, f, c, g)
			return exitOK
		case len(r.pos) == 0 && cmd.deflt == "":
			// Bare `sandboxd` (or `sandboxd config`) prints the help; only serve runs the daemon.
			printHelp(stdout, full, cmd, g)
			return exitOK
		}
		name := cmd.deflt
		if len(r.pos) > 0 {
			name, args = r.pos[0], r.rest
		} else {
			args = nil
		}
		next := cmd.sub(name)
		if next == nil {
			return unknownCommand(stderr, full, name, cmd)
		}
		cmd, full = next, full+" "+name
	}

	fs, runf := cmd.leafFlags(full, g)
	r, err := parseLevel(fs, args, cmd.rawArgs)
	if err != nil {
		if code := usageError(stderr, full, err.Error()); cmd.usageStatus != 0 {
			return cmd.usageStatus
		} else {
			return code
		}
	}
	if r.help {
		printHelp(stdout, full, cmd, g)
		return exitOK
	}
	pos := append(r.pos, r.rest...)
	inv := &invocation{name: full, args: pos, g: g, stdout: stdout, stderr: stderr, usageStatus: cmd.usageStatus}
	// A global flag before the command that this command does not take is ignored, as
	// kubectl and tailscale do (an alias may carry --socket); after it, it is unknown.
	if g.set&gTimeout != 0 && cmd.globals&gTimeout != 0 && g.timeout < 0 {
		return inv.usageErr("--timeout %s is negative; give a positive duration such as 5s", api.FormatDuration(g.timeout))
	}
	if len(pos) < cmd.minArgs {
		return inv.usageErr("missing argument: %s", cmd.args)
	}
	if cmd.maxArgs >= 0 && len(pos) > cmd.maxArgs {
		return inv.usageErr("unexpected argument %q", pos[cmd.maxArgs])
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return runf(ctx, inv)
}

// flagSetFor is the flag set of a level above the leaf: every global flag (checked
// against the leaf once it is known), and at the top -v/--version.
func flagSetFor(full string, g *globals, top bool) *flag.FlagSet {
	fs := flag.NewFlagSet(full, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	g.register(fs, gAll, nil)
	if top {
		fs.Bool("version", false, "print the version and exit")
		fs.Bool("v", false, "print the version and exit")
	}
	return fs
}

func usageError(stderr io.Writer, full, msg string) int {
	fmt.Fprintf(stderr, "%s: %s\nRun '%s --help' for usage.\n", full, msg, full)
	return exitUsage
}

func unknownCommand(stderr io.Writer, full, name string, parent *command) int {
	fmt.Fprintf(stderr, "%s: unknown command %q", full, name)
	if s := closest(name, parent.subNames()); s != "" {
		fmt.Fprintf(stderr, "\n\nDid you mean this?\n\t%s %s\n", full, s)
	} else {
		fmt.Fprintln(stderr)
	}
	fmt.Fprintf(stderr, "Run '%s --help' for the commands.\n", full)
	return exitUsage
}

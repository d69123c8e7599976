package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/internal/suggest"
)

// A command is one entry of the command table (CONTRACT §9). A leaf has a run (or a setup
// that declares its flags and returns the run); a parent has subs and dispatches to them.
// Help, flag parsing (before or after the subcommand, --flag=value and --flag value), "did
// you mean" and exit 64 for usage errors come from here, so a new command is one entry.
type command struct {
	name    string
	summary string // one line, for the command list
	// args is the synopsis of the positional arguments ("FILE", "ID", "-- CMD [ARG...]").
	args string
	// long is printed under the synopsis by `help CMD` and `CMD --help`.
	long string
	// globals says which global flags the command takes.
	globals globalSet
	// minArgs and maxArgs bound the positional arguments; maxArgs < 0 means any number.
	minArgs, maxArgs int
	// usageStatus replaces 64 for a usage error (run: 125, so that sandboxd's own failure
	// never reads as the command's exit status).
	usageStatus int
	// rawArgs ends flag parsing at the first positional argument (or "--"): what follows
	// is passed on untouched, so the flags of a command to run stay that command's.
	rawArgs bool
	// setup declares the command's own flags on fs and returns the run that reads them.
	setup func(fs *flag.FlagSet) runFunc
	// run is the run of a command without flags of its own (when setup is nil).
	run  runFunc
	subs []*command
	// deflt is the sub that runs when none is named (e.g. "list").
	deflt  string
	hidden bool
}

type runFunc func(ctx context.Context, inv *invocation) int

// invocation is what a command's run gets: its positional arguments, the global flags, the
// outputs and the command's full name ("sandboxd config check") for messages.
type invocation struct {
	name           string
	args           []string
	g              *globals
	stdout, stderr io.Writer
	usageStatus    int // the command's usageStatus (0: exitUsage)
	// serverUIDs: the uids the daemon may run as (client.Client.ServerUIDs); nil trusts
	// any server. `sandboxd run` sets it (issue 21).
	serverUIDs []uint32
}

// usageErr prints a usage error for the command and returns exit 64.
func (inv *invocation) usageErr(format string, a ...any) int {
	fmt.Fprintf(inv.stderr, "%s: %s\n", inv.name, fmt.Sprintf(format, a...))
	fmt.Fprintf(inv.stderr, "Run '%s --help' for usage.\n", inv.name)
	if inv.usageStatus != 0 {
		return inv.usageStatus
	}
	return exitUsage
}

// globalSet is a set of global flags.
type globalSet uint8

const (
	gSocket globalSet = 1 << iota
	gJSON
	gTimeout
	gConfig
	// gClient is what every command that talks to the daemon takes (CONTRACT §9); its
	// --config names the file whose disks a failure to reach the daemon measures.
	gClient = gSocket | gJSON | gTimeout | gConfig
	gAll    = gClient
)

// globals holds the global flags; set records which were given.
type globals struct {
	socket  string
	json    bool
	timeout time.Duration
	config  string
	set     globalSet
}

var globalFlags = []struct {
	bit   globalSet
	name  string
	value string // the placeholder in help; "" for a bool
	usage string
}{
	{gSocket, "socket", "PATH", "the daemon's socket (default $" + api.SocketEnv + ", then " + api.DefaultSocketPath + ")"},
	{gJSON, "json", "", "print the answer (or the problem document) as JSON"},
	{gTimeout, "timeout", "DURATION", "give up after this long, e.g. 5s (default: the call's deadline + 1s)"},
	{gConfig, "config", "FILE", "the config file (a client command reads it, or $SANDBOXD_CONFIG, then " + config.DefaultPath + ", to measure the disks a call is about when the daemon gives no answer)"},
}

// trackedValue wraps a flag.Value so that setting it records the global as given.
type trackedValue struct {
	flag.Value
	g   *globals
	bit globalSet
}

func (t trackedValue) Set(s string) error {
	if err := t.Value.Set(s); err != nil {
		return err
	}
	t.g.set |= t.bit
	return nil
}

func (t trackedValue) IsBoolFlag() bool {
	b, ok := t.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// register declares the globals of set on fs, bound to g. usage overrides a flag's help
// text for one command (serve's --socket is where it listens, not where it calls).
func (g *globals) register(fs *flag.FlagSet, set globalSet, usage map[string]string) {
	tmp := flag.NewFlagSet("", flag.ContinueOnError)
	tmp.StringVar(&g.socket, "socket", g.socket, "")
	tmp.BoolVar(&g.json, "json", g.json, "")
	tmp.DurationVar(&g.timeout, "timeout", g.timeout, "")
	tmp.StringVar(&g.config, "config", g.config, "")
	for _, gf := range globalFlags {
		if set&gf.bit == 0 {
			continue
		}
		u := gf.usage
		if o, ok := usage[gf.name]; ok {
			u = o
		}
		fs.Var(trackedValue{tmp.Lookup(gf.name).Value, g, gf.bit}, gf.name, u)
	}
}

// parseResult is what parsing one level of the command line found.
type parseResult struct {
	pos     []string // positional arguments
	rest    []string // unparsed (after the first positional, when stopping there)
	help    bool
	version bool
}

// parseLevel parses args with fs, flags and positional arguments interspersed, until "--"
// (everything after it is positional) or, with stop, the first positional argument.
// -h/--help anywhere asks for help. Errors are usage errors, already worded for a person.
func parseLevel(fs *flag.FlagSet, args []string, stop bool) (parseResult, error) {
	var r parseResult
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			r.pos = append(r.pos, args[i+1:]...)
			return r, nil
		}
		if len(a) < 2 || a[0] != '-' {
			r.pos = append(r.pos, a)
			if stop {
				r.rest = args[i+1:]
				return r, nil
			}
			continue
		}
		name := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		value, hasValue := "", false
		if k, v, ok := strings.Cut(name, "="); ok {
			name, value, hasValue = k, v, true
		}
		f := fs.Lookup(name)
		if f == nil {
			switch name {
			case "h", "help":
				r.help, r.rest = true, args[i+1:]
				return r, nil
			}
			return r, &unknownFlagError{name: name, suggestion: suggestFlag(fs, name)}
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			if !hasValue {
				value = "true"
			}
		} else if !hasValue {
			if i+1 >= len(args) {
				return r, fmt.Errorf("flag --%s needs a value", name)
			}
			i++
			value = args[i]
		}
		if err := fs.Set(name, value); err != nil {
			return r, fmt.Errorf("invalid value %q for --%s: %s", value, name, valueHint(f, err))
		}
		if name == "version" || name == "v" {
			r.version = true
		}
	}
	return r, nil
}

// unknownFlagError is a flag the command (or level) does not declare.
type unknownFlagError struct{ name, suggestion string }

func (e *unknownFlagError) Error() string { return "unknown flag --" + e.name + e.suggestion }

// ownerOf names the commands under c (as "sandboxd launch") that declare flag name.
func ownerOf(c *command, full, name string) []string {
	if len(c.subs) == 0 {
		fs, _ := c.leafFlags(full, &globals{})
		if fs.Lookup(name) != nil {
			return []string{full}
		}
		return nil
	}
	var out []string
	for _, s := range c.subs {
		if !s.hidden {
			out = append(out, ownerOf(s, full+" "+s.name, name)...)
		}
	}
	return out
}

// valueHint says what a flag wants, instead of the flag package's bare "parse error".
func valueHint(f *flag.Flag, err error) string {
	v := f.Value
	if t, ok := v.(trackedValue); ok {
		v = t.Value
	}
	switch fmt.Sprintf("%T", v) {
	case "*flag.durationValue":
		return "want a duration such as 500ms, 5s or 1m30s"
	case "*flag.uint64Value", "*flag.uintValue":
		return "want a whole number, 0 or more"
	case "*flag.intValue", "*flag.int64Value":
		return "want a whole number"
	case "*flag.boolValue":
		return "want true or false"
	}
	return err.Error()
}

// suggestFlag names the declared flag closest to a misspelt one.
func suggestFlag(fs *flag.FlagSet, name string) string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	if s := closest(name, names); s != "" {
		return fmt.Sprintf(" (did you mean --%s?)", s)
	}
	return ""
}

// closest returns the candidate within two edits of s (or having s as a prefix), or "".
func closest(s string, candidates []string) string {
	best, bestDist := "", 3
	for _, c := range candidates {
		d := suggest.Distance(s, c)
		if len(s) >= 2 && strings.HasPrefix(c, s) {
			d = min(d, 1)
		}
		if d < bestDist {
			best, bestDist = c, d
		}
	}
	return best
}

func (c *command) sub(name string) *command {
	for _, s := range c.subs {
		if s.name == name {
			return s
		}
	}
	return nil
}

func (c *command) subNames() []string {
	var out []string
	for _, s := range c.subs {
		if !s.hidden {
			out = append(out, s.name)
		}
	}
	return out
}

// leafFlags is the flag set of a leaf: its globals and its own flags; it returns the run.
func (c *command) leafFlags(full string, g *globals) (*flag.FlagSet, runFunc) {
	fs := flag.NewFlagSet(full, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var usage map[string]string
	if c.name == "serve" {
		usage = serveGlobalUsage
	}
	g.register(fs, c.globals, usage)
	run := c.run
	if c.setup != nil {
		run = c.setup(fs)
	}
	return fs, run
}

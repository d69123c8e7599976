package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
)

// helpCommand is `sandboxd help [COMMAND [SUBCOMMAND]]`.
func helpCommand() *command {
	return &command{name: "help", summary: "help about any command", args: "[COMMAND [SUBCOMMAND]]", maxArgs: -1,
		run: func(ctx context.Context, inv *invocation) int {
			c, full := rootCommand(), "sandboxd"
			for _, name := range inv.args {
				next := c.sub(name)
				if next == nil {
					return unknownCommand(inv.stderr, full, name, c)
				}
				c, full = next, full+" "+name
			}
			printHelp(inv.stdout, full, c, inv.g)
			return exitOK
		}}
}

// printHelp writes a command's help: synopsis, summary, flags, subcommands.
func printHelp(w io.Writer, full string, c *command, g *globals) {
	if len(c.subs) > 0 {
		fmt.Fprintf(w, "Usage: %s COMMAND [flags]\n\n%s.\n", full, upperFirst(c.summary))
		if c.long != "" {
			fmt.Fprintf(w, "\n%s\n", strings.TrimSpace(c.long))
		}
		fmt.Fprintln(w, "\nCommands:")
		for _, s := range c.subs {
			if s.hidden {
				continue
			}
			d := ""
			if s.name == c.deflt {
				d = " (the default)"
			}
			fmt.Fprintf(w, "  %-10s %s%s\n", s.name, s.summary, d)
		}
		if c.name == "sandboxd" {
			fs := flag.NewFlagSet(full, flag.ContinueOnError)
			(&globals{}).register(fs, gAll, map[string]string{"config": "the config file (serve, config check)"})
			fmt.Fprintln(w, "\nGlobal flags (before or after the command; each command takes those that apply to it):")
			var fl []*flag.Flag
			fs.VisitAll(func(f *flag.Flag) { fl = append(fl, f) })
			printFlags(w, fl)
			fmt.Fprintf(w, "  %-22s%s\n", "-v, --version", "print the version")
		}
		fmt.Fprintf(w, "\nRun '%s COMMAND --help' for a command's flags.\n", full)
		return
	}
	fs, _ := c.leafFlags(full, &globals{})
	synopsis := full
	if hasOwnFlags(fs) || c.globals != 0 {
		synopsis += " [flags]"
	}
	if c.args != "" {
		synopsis += " " + c.args
	}
	fmt.Fprintf(w, "Usage: %s\n\n%s.\n", synopsis, upperFirst(c.summary))
	if c.long != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimSpace(c.long))
	}
	var own, glob []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) {
		if _, ok := f.Value.(trackedValue); ok {
			glob = append(glob, f)
		} else {
			own = append(own, f)
		}
	})
	if len(own) > 0 {
		fmt.Fprintln(w, "\nFlags:")
		printFlags(w, own)
	}
	if len(glob) > 0 {
		fmt.Fprintln(w, "\nGlobal flags (before or after the command):")
		printFlags(w, glob)
	}
}

func hasOwnFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(f *flag.Flag) {
		if _, ok := f.Value.(trackedValue); !ok {
			n++
		}
	})
	return n > 0
}

func printFlags(w io.Writer, fl []*flag.Flag) {
	for _, f := range fl {
		placeholder, usage := flag.UnquoteUsage(f)
		if _, ok := f.Value.(trackedValue); ok {
			placeholder = globalPlaceholder(f.Name)
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			placeholder = ""
		} else if placeholder == "value" {
			placeholder = "VALUE"
		}
		head := "  --" + f.Name
		if placeholder != "" {
			head += " " + strings.ToUpper(placeholder)
		}
		if def := f.DefValue; def != "" && def != "false" && def != "0" && def != "0s" && def != "[]" {
			usage += " (default " + def + ")"
		}
		if len(head) <= 22 {
			fmt.Fprintf(w, "%-24s%s\n", head, usage)
		} else {
			fmt.Fprintf(w, "%s\n%-24s%s\n", head, "", usage)
		}
	}
}

func globalPlaceholder(name string) string {
	for _, gf := range globalFlags {
		if gf.name == name {
			return gf.value
		}
	}
	return ""
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

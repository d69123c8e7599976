package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/config"
)

func configCommand() *command {
	return &command{name: "config", summary: "print the default config, check a file, or show the daemon's config",
		subs: []*command{
			{name: "default", summary: "print the embedded default config (what the daemon runs on with no file)",
				run: func(ctx context.Context, inv *invocation) int {
					fmt.Fprint(inv.stdout, config.Default())
					return exitOK
				}},
			{name: "check", summary: "validate a config file: every problem named with its key and line; exit 78 if invalid",
				args: "[FILE]", maxArgs: 1, globals: gJSON | gConfig,
				long: "FILE (or --config FILE) defaults to " + config.DefaultPath + ".", run: runConfigCheck},
			{name: "show", summary: "print the running daemon's effective config", globals: gClient, run: runConfigShow},
			{name: "reload", summary: "make the running daemon re-read its config file and wait for the verdict; exit 78 if it rejected it",
				globals: gClient,
				long: "What the unit's ExecReload runs, so that `systemctl reload sandboxd` fails on a rejected file\n" +
					"(the problems go to stderr and the journal; the last good config stays in force).", run: runConfigReload},
		}}
}

func runConfigShow(ctx context.Context, inv *invocation) int {
	text, err := inv.client().Config(ctx)
	if err != nil {
		return failure(err, inv, inv.disks())
	}
	if inv.g.json {
		printJSON(inv.stdout, map[string]string{"toml": text})
		return exitOK
	}
	fmt.Fprint(inv.stdout, text)
	return exitOK
}

// runConfigCheck validates a file and prints every problem, one a line, with key and line,
// including the site and cache roots that this machine's filesystem makes unsafe.
func runConfigCheck(ctx context.Context, inv *invocation) int {
	path := config.DefaultPath
	switch {
	case len(inv.args) == 1 && inv.g.config != "" && inv.args[0] != inv.g.config:
		return inv.usageErr("give the file once: as FILE or as --config, not both")
	case len(inv.args) == 1:
		path = inv.args[0]
	case inv.g.config != "":
		path = inv.g.config
	}
	var problems []string
	if _, err := os.Stat(path); err != nil {
		problems = []string{err.Error()}
	} else if _, err := config.Check(path); err != nil {
		var ve *config.ValidationError
		if errors.As(err, &ve) {
			for _, p := range ve.Problems {
				problems = append(problems, p.Error())
			}
		} else {
			problems = []string{err.Error()}
		}
	}
	if inv.g.json {
		printJSON(inv.stdout, map[string]any{"file": path, "ok": len(problems) == 0, "problems": nonNil(problems)})
	} else if len(problems) == 0 {
		fmt.Fprintf(inv.stdout, "%s: ok\n", path)
	}
	if len(problems) == 0 {
		return exitOK
	}
	if !inv.g.json {
		for _, p := range problems {
			fmt.Fprintln(inv.stderr, p)
		}
	}
	return exitConfig
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// runConfigReload asks the daemon to reload (POST /v1/config/reload) and reports the
// outcome: exit 0 when the file was taken, 78 (as config check) when it was rejected.
func runConfigReload(ctx context.Context, inv *invocation) int {
	var res api.ConfigReload
	if err := inv.client().Do(ctx, "POST", "/v1/config/reload", struct{}{}, &res, 0); err != nil {
		return failure(err, inv, inv.disks())
	}
	if inv.g.json {
		printJSON(inv.stdout, res)
	} else if res.Reloaded {
		fmt.Fprintf(inv.stdout, "%s: reloaded\n", res.File)
	} else {
		fmt.Fprintf(inv.stderr, "%s: rejected; the last good config stays in force\n", res.File)
		for _, p := range res.Problems {
			fmt.Fprintln(inv.stderr, p)
		}
	}
	if !res.Reloaded {
		return exitConfig
	}
	return exitOK
}

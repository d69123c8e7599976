package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/sandboxd/sandboxd/internal/config"
)

func runConfig(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: sandboxd config default | config check FILE | config show")
		return exitUsage
	}
	switch args[0] {
	case "default":
		fmt.Fprint(stdout, config.Default())
		return exitOK
	case "check":
		if len(args) != 2 {
			fmt.Fprintln(stderr, "usage: sandboxd config check FILE")
			return exitUsage
		}
		return configCheck(args[1], stdout, stderr)
	case "show":
		var cf clientFlags
		fs := newFlagSet("config show", stderr)
		cf.register(fs)
		if code, ok := parse(fs, args[1:]); !ok {
			return code
		}
		text, err := cf.client().Config(ctx)
		if err != nil {
			return failure(err, &cf, "/", stdout, stderr)
		}
		fmt.Fprint(stdout, text)
		return exitOK
	}
	fmt.Fprintf(stderr, "sandboxd config: unknown subcommand %q (default, check, show)\n", args[0])
	return exitUsage
}

// configCheck validates a file and prints every problem, one a line, with key and line.
func configCheck(path string, stdout, stderr io.Writer) int {
	if _, err := os.Stat(path); err != nil {
		fmt.Fprintf(stderr, "sandboxd config check: %v\n", err)
		return exitConfig
	}
	if _, err := config.Load(path); err != nil {
		var ve *config.ValidationError
		if errors.As(err, &ve) {
			for _, p := range ve.Problems {
				fmt.Fprintf(stderr, "%s\n", p)
			}
		} else {
			fmt.Fprintf(stderr, "%v\n", err)
		}
		return exitConfig
	}
	fmt.Fprintf(stdout, "%s: ok\n", path)
	return exitOK
}

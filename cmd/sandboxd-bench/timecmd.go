package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"time"
)

// runTimeCmd runs a command (after "--") and prints its wall time as a result line, so
// a shell tool such as `find -delete` is timed the same way as everything else.
func runTimeCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("time", stderr)
	var r Result
	fs.StringVar(&r.Test, "test", "", "test name recorded in the result")
	fs.StringVar(&r.Target, "target", "", "target name recorded in the result")
	fs.IntVar(&r.Round, "round", 0, "round number recorded in the result")
	if err := fs.Parse(args); err != nil {
		return err
	}
	argv := fs.Args()
	if len(argv) == 0 {
		return errors.New("usage: time -test T -target X -- COMMAND [ARGS]")
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = stderr, stderr
	start := time.Now()
	err := cmd.Run()
	el := time.Since(start)
	if err != nil {
		return fmt.Errorf("%v: %w", argv, err)
	}
	r.N, r.Seconds = 1, el.Seconds()
	r.Value, r.Unit = float64(el.Nanoseconds())/1e6, "ms"
	return json.NewEncoder(stdout).Encode(r)
}

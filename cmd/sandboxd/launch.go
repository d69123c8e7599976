package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/sandboxd/sandboxd/api"
)

func runLaunch(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var cf clientFlags
	fs := newFlagSet("launch", stderr)
	cf.register(fs)
	site := fs.String("site", "", "the site (may be left out when exactly one is configured)")
	needBytes := fs.String("need-bytes", "", "free bytes the command needs (e.g. 1048576 or 1MiB)")
	needInodes := fs.Uint64("need-inodes", 0, "free inodes the command needs")
	deadline := fs.Duration("deadline", 0, "the call's deadline (default [launch] deadline)")
	var mounts multiFlag
	fs.Var(&mounts, "mount", "a mount the command needs (repeatable)")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	req := api.LaunchRequest{Site: *site, Mounts: mounts}
	if *needBytes != "" {
		n, err := api.ParseSize(*needBytes)
		if err != nil {
			fmt.Fprintf(stderr, "sandboxd launch: --need-bytes: %v\n", err)
			return exitUsage
		}
		req.NeedBytes = &n
	}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "need-inodes":
			req.NeedInodes = needInodes
		case "deadline":
			d := api.Duration(*deadline)
			req.Deadline = &d
		}
	})
	resp, err := cf.client().Launch(ctx, req)
	if err != nil {
		return failure(err, &cf, sitePath(*site), stdout, stderr)
	}
	if cf.json {
		printJSON(stdout, resp)
	} else {
		fmt.Fprintf(stdout, "ok: %s\n", resp.Detail)
	}
	if resp.Advice != nil {
		fmt.Fprintf(stderr, "sandboxd: advice: %s: %s\n", *resp.Advice, resp.Detail)
	}
	return exitOK
}

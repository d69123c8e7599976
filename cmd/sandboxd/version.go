package main

import (
	"context"
	"fmt"
	"runtime"
)

func versionCommand() *command {
	return &command{name: "version", summary: "version, commit and Go version", globals: gJSON, run: runVersion}
}

func runVersion(ctx context.Context, inv *invocation) int {
	if inv.g.json {
		printJSON(inv.stdout, map[string]string{"version": version, "commit": commit, "go": runtime.Version(),
			"os": runtime.GOOS, "arch": runtime.GOARCH})
		return exitOK
	}
	fmt.Fprintf(inv.stdout, "sandboxd %s (commit %s, %s %s/%s)\n", version, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return exitOK
}

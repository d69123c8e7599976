package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/pressure"
)

// client is the API client the global flags describe.
func (inv *invocation) client() *client.Client {
	return &client.Client{SocketPath: inv.g.socket, Timeout: inv.g.timeout, ServerUIDs: inv.serverUIDs}
}

func printJSON(w io.Writer, v any) {
	b, _ := json.MarshalIndent(v, "", "  ")
	fmt.Fprintln(w, string(b))
}

// failure prints a client error and returns its exit status: the problem's code status
// for a refusal; 69 ("no verdict") with the client's own measurement of the disk when the
// daemon cannot be reached or gave no answer within --timeout, so a launcher's failure
// always says how full the disk is.
func failure(err error, inv *invocation, path string) int {
	stdout, stderr := inv.stdout, inv.stderr
	var pe *client.ProblemError
	if errors.As(err, &pe) {
		if inv.g.json {
			printJSON(stdout, pe.Problem)
		}
		fmt.Fprintf(stderr, "%s: %s: %s\n", inv.name, pe.Problem.Code, pe.Problem.Detail)
		return pe.Problem.Code.ExitCode()
	}
	var ue *client.UnreachableError
	var te *client.TimeoutError
	switch {
	case errors.As(err, &ue):
		disk := ownMeasurement(path)
		if inv.g.json {
			printJSON(stdout, map[string]any{"error": "unreachable", "socket": ue.Socket, "reason": ue.Reason, "disk": disk})
		}
		fmt.Fprintf(stderr, "%s: %v; no verdict\n", inv.name, ue)
		fmt.Fprintf(stderr, "%s: measured by the client: %s\n", inv.name, diskLine(disk))
		return exitUnreachable
	case errors.As(err, &te):
		disk := ownMeasurement(path)
		limit := "--timeout " + api.FormatDuration(te.Limit)
		if inv.g.set&gTimeout == 0 {
			limit = "the default timeout of " + api.FormatDuration(te.Limit) + " (the call's deadline + 1s; raise it with --timeout)"
		}
		if inv.g.json {
			printJSON(stdout, map[string]any{"error": "timeout", "socket": te.Socket, "timeout_seconds": te.Limit.Seconds(),
				"connected": te.Connected, "reason": te.Error(), "disk": disk})
		}
		if te.Connected {
			fmt.Fprintf(stderr, "%s: no answer from sandboxd at %s within %s; the daemon took the connection and may still complete the call; no verdict\n",
				inv.name, te.Socket, limit)
		} else {
			fmt.Fprintf(stderr, "%s: no connection to sandboxd at %s within %s: the daemon is not accepting connections, or the limit is shorter than a connect; no verdict\n",
				inv.name, te.Socket, limit)
		}
		fmt.Fprintf(stderr, "%s: measured by the client: %s\n", inv.name, diskLine(disk))
		return exitUnreachable
	}
	if inv.g.json {
		printJSON(stdout, map[string]any{"error": "internal", "reason": err.Error()})
	}
	fmt.Fprintf(stderr, "%s: %v\n", inv.name, err)
	return exitSoftware
}

func ownMeasurement(path string) any {
	if path == "" {
		path = "/"
	}
	// A site that does not exist yet is measured on its nearest existing parent.
	p := pressure.ExistingAncestor(path)
	fs, err := pressure.Statfs(p)
	if err != nil {
		return map[string]string{"path": path, "error": err.Error()}
	}
	fs.Path = p
	return fs
}

func diskLine(v any) string {
	fs, ok := v.(api.Filesystem)
	if !ok {
		b, _ := json.Marshal(v)
		return string(b)
	}
	return fs.Fingerprint()
}

// sitePath finds a site's path in the local config (the packaged file if readable, else
// the embedded default), so an unreachable daemon's error can still measure the right disk.
func sitePath(site string) string {
	cfg, err := config.LoadOrDefault(config.DefaultPath)
	if err != nil {
		cfg, err = config.LoadOrDefault("")
		if err != nil {
			return "/"
		}
	}
	for _, s := range cfg.Sites {
		if s.Name == site || (site == "" && len(cfg.Sites) == 1) {
			return s.Path
		}
	}
	return "/"
}

// multiFlag collects a repeated flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

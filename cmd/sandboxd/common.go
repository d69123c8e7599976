package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/pressure"
	"github.com/sandboxd/sandboxd/systemd"
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
// for a refusal; 69 ("no verdict") with the client's own measurement of the disks the call
// is about (paths: a site's, or the config's watched filesystems; none for a command not
// about a disk) when the daemon cannot be reached or gave no answer within --timeout, so a
// launcher's failure always says how full its disk is.
func failure(err error, inv *invocation, paths []string) int {
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
		disks := measureAll(paths)
		unit := unitNote(ue.Socket)
		if inv.g.json {
			printJSON(stdout, withUnit(withDisks(map[string]any{"error": "unreachable", "socket": ue.Socket, "reason": ue.Reason}, disks), unit))
		}
		fmt.Fprintf(stderr, "%s: %v; no verdict\n", inv.name, ue)
		if unit != "" {
			fmt.Fprintf(stderr, "%s: %s\n", inv.name, unit)
		}
		printDisks(stderr, inv.name, disks)
		return exitUnreachable
	case errors.As(err, &te):
		disks := measureAll(paths)
		limit := "--timeout " + api.FormatDuration(te.Limit)
		if inv.g.set&gTimeout == 0 {
			limit = "the default timeout of " + api.FormatDuration(te.Limit) + " (the call's deadline + 1s; raise it with --timeout)"
		}
		unit := unitNote(te.Socket)
		if inv.g.json {
			printJSON(stdout, withUnit(withDisks(map[string]any{"error": "timeout", "socket": te.Socket, "timeout_seconds": te.Limit.Seconds(),
				"connected": te.Connected, "reason": te.Error()}, disks), unit))
		}
		if te.Connected {
			fmt.Fprintf(stderr, "%s: no answer from sandboxd at %s within %s; the daemon took the connection and may still complete the call; no verdict\n",
				inv.name, te.Socket, limit)
		} else {
			fmt.Fprintf(stderr, "%s: no connection to sandboxd at %s within %s: the daemon is not accepting connections, or the limit is shorter than a connect; no verdict\n",
				inv.name, te.Socket, limit)
		}
		if unit != "" {
			fmt.Fprintf(stderr, "%s: %s\n", inv.name, unit)
		}
		printDisks(stderr, inv.name, disks)
		return exitUnreachable
	}
	if inv.g.json {
		printJSON(stdout, map[string]any{"error": "internal", "reason": err.Error()})
	}
	fmt.Fprintf(stderr, "%s: %v\n", inv.name, err)
	return exitSoftware
}

// unitNote is what systemd says of the packaged unit when the call got no answer or no
// connection on the packaged socket (api.DefaultSocketPath, the socket of sandboxd.socket):
// "sandboxd is restarting (sandboxd.service: restarted once so far by systemd, every 2s; it
// fails after 5 starts within 1m); a retry may be answered by the next daemon", or that
// the unit has failed. "" elsewhere, without systemd, or when the unit runs. Asked within
// 500 ms: a client that gives up says why, without waiting much longer.
func unitNote(socket string) string {
	if socket != api.DefaultSocketPath {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	u, err := systemd.QueryUnit(ctx, "sandboxd.service")
	if err != nil {
		return ""
	}
	return u.Describe()
}

// withUnit adds the unit's note to a JSON answer.
func withUnit(m map[string]any, note string) map[string]any {
	if note != "" {
		m["unit"] = note
	}
	return m
}

// measureAll is the client's own measurement of each path's filesystem, once per
// filesystem (two paths on one disk are one report).
func measureAll(paths []string) []any {
	var out []any
	seen := map[string]bool{}
	for _, p := range paths {
		d := ownMeasurement(p)
		if fs, ok := d.(api.Filesystem); ok {
			key := fs.Devno
			if key == "" {
				key = fs.Mountpoint
			}
			if key != "" && seen[key] {
				continue
			}
			seen[key] = true
		}
		out = append(out, d)
	}
	return out
}

// withDisks adds the measurements to a JSON answer: "disk" (the first, as before) and
// "disks" (all); nothing for a command not about a disk.
func withDisks(m map[string]any, disks []any) map[string]any {
	if len(disks) > 0 {
		m["disk"], m["disks"] = disks[0], disks
	}
	return m
}

// printDisks prints one "measured by the client" line per disk.
func printDisks(w io.Writer, name string, disks []any) {
	for _, d := range disks {
		fmt.Fprintf(w, "%s: measured by the client: %s\n", name, diskLine(d))
	}
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

// multiFlag collects a repeated flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

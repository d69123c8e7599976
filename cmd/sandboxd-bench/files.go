package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// entrySuffixes are the seven entries a detached-command launcher leaves per job (pid,
// status, stdout, stderr, launch script, callback metadata, and a directory), the shape
// of /tmp/aura-bg in FIELD-NOTES; a job's id is the name up to the first ".".
var entrySuffixes = []string{".pid", ".status", ".out", ".err", ".launch.sh", ".callback.json", ""}

// jobWriter writes whole jobs of a launcher into dir with fresh mtimes. Its pid files
// name pid_max+1, a pid no process can have, so every job reads as finished.
type jobWriter struct {
	dir    string
	prefix string
	pid    []byte
}

func newJobWriter(dir, prefix string) (*jobWriter, error) {
	b, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		return nil, fmt.Errorf("read pid_max: %w", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("parse pid_max %q: %w", b, err)
	}
	return &jobWriter{dir: dir, prefix: prefix, pid: []byte(strconv.Itoa(n+1) + "\n")}, nil
}

// path is the i-th entry's path: entry i belongs to job i/7.
func (w *jobWriter) path(i int) string {
	id := fmt.Sprintf("%s%012x", w.prefix, i/len(entrySuffixes))
	return filepath.Join(w.dir, id+entrySuffixes[i%len(entrySuffixes)])
}

// entry writes the i-th entry.
func (w *jobWriter) entry(i int) error {
	p := w.path(i)
	switch entrySuffixes[i%len(entrySuffixes)] {
	case "":
		return os.Mkdir(p, 0o755)
	case ".pid":
		return os.WriteFile(p, w.pid, 0o644)
	default:
		return os.WriteFile(p, []byte("some output of a finished job\n"), 0o644)
	}
}

func runFill(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("fill", stderr)
	dir := fs.String("dir", "", "site directory (required, must exist)")
	n := fs.Int("n", 16381, "number of entries")
	prefix := fs.String("prefix", "f", "job id prefix (keeps fill and churn names apart)")
	age := fs.Duration("age", 0, "set every entry's mtime this far in the past (0: now)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" {
		return errors.New("-dir is required")
	}
	w, err := newJobWriter(*dir, *prefix)
	if err != nil {
		return err
	}
	at := time.Now().Add(-*age)
	for i := 0; i < *n; i++ {
		if err := w.entry(i); err != nil {
			return err
		}
		if *age > 0 {
			if err := os.Chtimes(w.path(i), at, at); err != nil {
				return err
			}
		}
		if i%1024 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
	}
	fmt.Fprintf(stdout, "created %d entries (%d jobs) in %s\n", *n, (*n+6)/7, *dir)
	return nil
}

// runChurn creates -rate entries a second, in ticks of 10 ms, until SIGTERM; then it
// prints how many it made and how far it fell behind (an honest rate, not the asked one).
func runChurn(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("churn", stderr)
	dir := fs.String("dir", "", "site directory (required, must exist)")
	rate := fs.Int("rate", 1000, "entries per second")
	prefix := fs.String("prefix", "c", "job id prefix")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" || *rate < 1 {
		return errors.New("-dir is required and -rate must be at least 1")
	}
	w, err := newJobWriter(*dir, *prefix)
	if err != nil {
		return err
	}
	start := time.Now()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	made, failed := 0, 0
	var firstErr error
	for {
		select {
		case <-ctx.Done():
			el := time.Since(start).Seconds()
			out := map[string]any{"entries": made, "failed": failed, "seconds": el,
				"rate": float64(made) / el}
			if firstErr != nil {
				out["first_error"] = firstErr.Error()
			}
			return json.NewEncoder(stdout).Encode(out)
		case <-tick.C:
		}
		want := int(time.Since(start).Seconds() * float64(*rate))
		for made+failed < want {
			if err := w.entry(made + failed); err != nil {
				failed++
				if firstErr == nil {
					firstErr = err
				}
				continue
			}
			made++
		}
	}
}

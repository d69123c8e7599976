package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/sandboxd/sandboxd/client"
)

// runGet prints the body of one GET over a Unix socket; with -wait it polls until the
// answer is 200 (how the script waits for /readyz) or the wait runs out.
func runGet(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("get", stderr)
	socket := fs.String("socket", "", "Unix socket of the server (required)")
	path := fs.String("path", "/v1/status", "request path")
	wait := fs.Duration("wait", 0, "poll until 200 for this long (0: one try)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *socket == "" {
		return errors.New("-socket is required")
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: client.DialUnix(*socket)}}
	end := time.Now().Add(*wait)
	for {
		body, err := get(ctx, hc, *path)
		if err == nil {
			_, err = stdout.Write(body)
			return err
		}
		if time.Now().After(end) || ctx.Err() != nil {
			return err
		}
		sleep(ctx, 100*time.Millisecond)
	}
}

func get(ctx context.Context, hc *http.Client, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://sandboxd"+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %d: %.300s", path, resp.StatusCode, b)
	}
	if len(b) > 0 && b[len(b)-1] == '\n' {
		return b, nil // the body as sent: sandboxd ends its documents with a newline
	}
	return append(b, '\n'), nil
}

package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// runBare serves the baseline: the cheapest honest net/http server on a Unix socket,
// answering a constant small JSON to every request, with the same kind of server
// timeouts a daemon sets. It is what "HTTP over a Unix socket costs" means in the
// comparison, so anything sandboxd adds on top shows as the ratio. With -body-file it
// answers a given document (sandboxd's own status), which separates the cost of moving
// a bigger body from the cost of building it. With -gzip LEVEL it also answers a
// request whose Accept-Encoding names gzip with that body gzip-coded (compressed once, at
// start), Content-Encoding: gzip and Vary: Accept-Encoding: what content negotiation of
// the status would cost and save (issue 27), measured on a handler that does nothing else.
func runBare(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bare", stderr)
	socket := fs.String("socket", "", "Unix socket path to listen on (required)")
	bodyFile := fs.String("body-file", "", "answer this file's bytes instead of a small constant JSON")
	contentLength := fs.Bool("content-length", false, "set Content-Length (net/http chunks a body over 2 KiB without it)")
	gzipLevel := fs.Int("gzip", -2, "answer a request accepting gzip with the body gzip-coded at this level (1-9; default: never)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *socket == "" {
		return errors.New("-socket is required")
	}
	// By path (issue 9 allows it here): a benchmark tool, not the daemon, listening where
	// its operator (scripts/bench.sh, in a directory it made) says.
	os.Remove(*socket)
	ln, err := net.Listen("unix", *socket)
	if err != nil {
		return err
	}
	body := []byte(`{"status":"ok"}` + "\n")
	if *bodyFile != "" {
		b, err := os.ReadFile(*bodyFile)
		if err != nil {
			return err
		}
		body = b
	}
	length := strconv.Itoa(len(body))
	var gz []byte
	if *gzipLevel != -2 {
		var buf bytes.Buffer
		zw, err := gzip.NewWriterLevel(&buf, *gzipLevel)
		if err != nil {
			return err
		}
		zw.Write(body)
		if err := zw.Close(); err != nil {
			return err
		}
		gz = buf.Bytes()
	}
	gzLength := strconv.Itoa(len(gz))
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			h := w.Header()
			h.Set("Content-Type", "application/json")
			b, n := body, length
			if gz != nil {
				h.Set("Vary", "Accept-Encoding")
				if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
					h.Set("Content-Encoding", "gzip")
					b, n = gz, gzLength
				}
			}
			if *contentLength {
				h.Set("Content-Length", n)
			}
			w.Write(b)
		}),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       60 * time.Second,
	}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

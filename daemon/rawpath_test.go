package daemon

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// rawRequest writes one request line as given (no client cleans it, as curl
// --path-as-is would) over the daemon's Unix socket and reads the answer.
func rawRequest(t *testing.T, sock, method, target string) (*http.Response, []byte) {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute))
	if _, err := io.WriteString(c, method+" "+target+" HTTP/1.1\r\nHost: sandboxd\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	// The request's method tells the reader a HEAD answer has no body, even with the
	// Content-Length a GET of the same path would carry.
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: method})
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

// TestUncleanPathsAnswerJSON: "//v1/status", "/v1/../v1/status" and "/v1/status/" got Go's
// HTML 307 redirect (QA on issue 14); every answer is JSON and every non-2xx one
// problem+json (CONTRACT §3): unclean paths are served as their clean form, and one whose
// escapes would change meaning is a 400.
func TestUncleanPathsAnswerJSON(t *testing.T) {
	td := startDaemon(t, noSites(t.TempDir()))
	for _, c := range []struct {
		method, target string
		status         int
	}{
		{"GET", "//v1/status", 200},
		{"GET", "/v1/../v1/status", 200},
		{"GET", "/v1/status/", 200},
		{"GET", "/v1/./status", 200},
		{"GET", "/v1//health", 200},
		{"HEAD", "//v1/status", 200},
		{"GET", "//v1/nope", 404},
		{"GET", "/../../etc/passwd", 404},
		{"POST", "//v1/status", 405},
		{"GET", "/v1/mounts/a%2F..%2F..//x", 400},
		{"GET", "/v1/%2e%2e/v1/status/", 400},
	} {
		resp, body := rawRequest(t, td.sock, c.method, c.target)
		ct := resp.Header.Get("Content-Type")
		if resp.StatusCode != c.status || resp.Header.Get("Location") != "" || strings.Contains(string(body), "<a href") {
			t.Errorf("%s %s: %d %s (Location %q), want %d without a redirect:\n%s", c.method, c.target, resp.StatusCode, ct,
				resp.Header.Get("Location"), c.status, body)
			continue
		}
		if c.method == "HEAD" {
			continue
		}
		if c.status >= 300 {
			var p api.Problem
			if ct != "application/problem+json" || json.Unmarshal(body, &p) != nil || p.Status != c.status || p.Detail == "" {
				t.Errorf("%s %s: %d %s, want a problem+json document:\n%s", c.method, c.target, resp.StatusCode, ct, body)
			}
			continue
		}
		var st api.Status
		if !strings.HasPrefix(ct, "application/json") || json.Unmarshal(body, &st) != nil {
			t.Errorf("%s %s: %s, want the JSON document of the clean path:\n%s", c.method, c.target, ct, body)
		}
	}
}

package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// TestStatusKeptDocumentIsNeverStale: GET /v1/status serves a kept document (issue 27),
// and a change the daemon has seen shows in the very next GET: free bytes after the
// sample that saw a write, a file in a site, a job registered and ended, a mount added,
// a condition raised. Each step first GETs, so a document is kept, then changes the
// disk or the registry, waits on the daemon's own view (its watcher, its site index,
// its event log) until the daemon has seen the change, and then asks exactly once.
func TestStatusKeptDocumentIsNeverStale(t *testing.T) {
	root := testenv.CgroupRoot(t)
	mnt, site, body := siteOnTmpfs(t, 64<<20, 0, fmt.Sprintf("[jobs]\ncgroup_root = %q\ngrace = \"1s\"\n", root))
	// Conditions stay quiet until the last step: reclaim below 2 MiB of 64 MiB.
	td := startDaemon(t, body)
	ctx := context.Background()
	status := func(what string) *api.Status {
		t.Helper()
		st, err := td.client.Status(ctx)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return st
	}
	fsOf := func(st *api.Status) api.Filesystem {
		for _, f := range st.Filesystems {
			if f.Path == mnt {
				return f
			}
		}
		t.Fatalf("no filesystem %s in status", mnt)
		return api.Filesystem{}
	}
	c := td.d.current()

	// Free bytes: 8 MiB written outside the site; the watcher's next sample sees it.
	before := fsOf(status("before the write")).AvailBytes
	status("again: the document is kept")
	if err := os.WriteFile(filepath.Join(mnt, "fill"), make([]byte, 8<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	poll(t, time.Minute, "the watcher's sample of the write", func() bool {
		for _, f := range c.pressure.Snapshot() {
			if f.Path == mnt && f.AvailBytes+8<<20 <= before {
				return true
			}
		}
		return false
	})
	if got := fsOf(status("after the sample")).AvailBytes; got+8<<20 > before {
		t.Errorf("status avail_bytes %d after the watcher sampled an 8 MiB write (before: %d): a stale document", got, before)
	}

	// A file in the site: the site's index counts it, and so does the next GET.
	status("before the site file")
	if err := os.WriteFile(filepath.Join(site, "job1.out"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	poll(t, time.Minute, "the site's index to count the file", func() bool {
		s, err := c.sites.Site("aura-bg")
		return err == nil && s.Files == 1
	})
	if st := status("after the site file"); len(st.Sites) != 1 || st.Sites[0].Files != 1 {
		t.Errorf("status sites %+v after the index counted one file: a stale document", st.Sites)
	}

	// A job registered (a mutating call) shows at once; its end, recorded as an event
	// when its process exits, shows in the GET after the event.
	status("before the job")
	p := jobSleeper(t)
	if _, err := td.client.RegisterJob(ctx, api.JobRequest{ID: "kept1", PID: p.Process.Pid}); err != nil {
		t.Fatal(err)
	}
	if st := status("after the registration"); st.Jobs == nil || st.Jobs.Running != 1 {
		t.Fatalf("status jobs %+v right after a registration: a stale document", st.Jobs)
	}
	p.Process.Signal(syscall.SIGTERM)
	var seen []string
	poll(t, time.Minute, "the event of the job's end", func() bool {
		page, err := td.client.Events(ctx, 0)
		if err != nil {
			return false
		}
		seen = seen[:0]
		for _, e := range page.Events {
			if e.Subject != "kept1" {
				continue
			}
			seen = append(seen, fmt.Sprintf("%s %q %v", e.Kind, e.Message, e.Fields))
			if _, ok := e.Fields["state"]; ok && e.Kind == api.EventKill {
				return true // the end's event: the registry says ended before it is recorded
			}
		}
		return false
	})
	if st := status("after the job ended"); st.Jobs == nil || st.Jobs.Running != 0 {
		t.Errorf("status jobs %+v after the daemon recorded the job's end: a stale document (events of the job: %s)", st.Jobs, strings.Join(seen, "; "))
	}

	// A mount added (a mutating call) shows at once.
	status("before the mount")
	dir := filepath.Join(mnt, "m")
	os.Mkdir(dir, 0o755)
	if code, _, b := td.do(t, "POST", "/v1/mounts", `{"name":"kept","path":"`+dir+`","required":false}`); code != 201 {
		t.Fatalf("register a mount: %d %s", code, b)
	}
	if st := status("after the mount"); len(st.Mounts) != 1 || st.Mounts[0].Name != "kept" {
		t.Errorf("status mounts %+v right after a mount was added: a stale document", st.Mounts)
	}

	// A condition raised: fill to under reclaim_below (2 MiB); once the watcher raised
	// DiskPressure, the next GET lists it.
	status("before the condition")
	var sf syscall.Statfs_t
	if err := syscall.Statfs(mnt, &sf); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "fill2"), make([]byte, int64(sf.Bavail)*sf.Bsize-(1<<20)), 0o644); err != nil {
		t.Fatal(err)
	}
	raised := func(conds []api.Condition) bool {
		for _, cd := range conds {
			if cd.Type == api.CondDiskPressure && cd.Subject == mnt && cd.Status {
				return true
			}
		}
		return false
	}
	poll(t, time.Minute, "the watcher to raise DiskPressure", func() bool { return raised(c.pressure.Conditions()) })
	if st := status("after the condition"); !raised(st.Conditions) {
		t.Errorf("status conditions %+v after the watcher raised DiskPressure: a stale document", st.Conditions)
	}
}

// TestStatusAnswersIdentityToGzip: a client that asks for gzip (Go's default Transport,
// undici's fetch, curl --compressed) gets the kept document as it is, with no
// Content-Encoding, as HTTP allows: gzip-coding it was measured to cost Go's client more
// in decoding than the smaller answer saves (issue 27, docs/benchmarks.md). HEAD answers
// the same headers without the body.
func TestStatusAnswersIdentityToGzip(t *testing.T) {
	td := startDaemon(t, noSites(t.TempDir()))
	raw := &http.Client{Transport: &http.Transport{DisableCompression: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", td.sock)
		}}}
	defer raw.CloseIdleConnections()
	for _, method := range []string{"GET", "HEAD"} {
		for _, ae := range []string{"gzip", "gzip, deflate, br, zstd", "*", ""} {
			req, _ := http.NewRequest(method, "http://sandboxd/v1/status", nil)
			if ae != "" {
				req.Header.Set("Accept-Encoding", ae)
			}
			resp, err := raw.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			what := fmt.Sprintf("%s /v1/status, Accept-Encoding %q", method, ae)
			if resp.StatusCode != 200 || resp.Header.Get("Content-Encoding") != "" || resp.Header.Get("Content-Type") != "application/json" {
				t.Errorf("%s: %d, Content-Encoding %q, Content-Type %q; want 200 identity JSON", what, resp.StatusCode,
					resp.Header.Get("Content-Encoding"), resp.Header.Get("Content-Type"))
			}
			n, err := strconv.Atoi(resp.Header.Get("Content-Length"))
			if err != nil || n < len(`{"api_version":1}`) {
				t.Errorf("%s: Content-Length %q", what, resp.Header.Get("Content-Length"))
			}
			if method == "HEAD" {
				if len(b) != 0 {
					t.Errorf("%s: a body of %d bytes", what, len(b))
				}
				continue
			}
			var st api.Status
			if len(b) != n || json.Unmarshal(b, &st) != nil || st.APIVersion != 1 {
				t.Errorf("%s: %d bytes for Content-Length %d, not the status document: %.200s", what, len(b), n, b)
			}
		}
	}
}

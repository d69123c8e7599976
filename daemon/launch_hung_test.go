package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/fusetest"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// TestLaunchOnAHungFUSESiteAnswersAtItsDeadline: a site on a FUSE mount whose server has
// stopped answering (every lookup and getattr blocks; the statfs of the mount's own path
// is cached by nobody) gets, for a launch with a 500-ms deadline, the precise refusal:
// busy, 503 with Retry-After, "the call's deadline (500ms) passed before statfs
// answered". The launch's measurement (the walk to the site's nearest existing
// directory, stat and statfs) is handed to a goroutine on a FUSE mount, never run on the
// caller's (the inline path is for local filesystems only: pressure/inline.go), so the
// hung mount cannot hold the call past its deadline. Before, the walk's lstat ran on the
// caller's goroutine and the call never answered.
func TestLaunchOnAHungFUSESiteAnswersAtItsDeadline(t *testing.T) {
	testenv.RequireRoot(t)
	mnt := mountDir(t, "l27-hung-site")
	srv := fusetest.Start(t, mnt, fusetest.Options{})
	site := filepath.Join(mnt, "runs")
	if err := os.Mkdir(site, 0o755); err != nil {
		t.Fatal(err)
	}
	td := startDaemon(t, fmt.Sprintf(`
[[site]]
name = "runs"
path = %q
[[filesystem]]
path = %q
reserve = "0"
`, site, mnt))
	// Cleanups run last-registered first: the server goes (its blocked requests fail with
	// ENOTCONN) before the daemon stops, so no daemon goroutine is left in the mount.
	t.Cleanup(srv.Kill)
	if code, _, body := td.do(t, "POST", "/v1/launch", `{"site":"runs","need_bytes":0}`); code != 200 {
		t.Fatalf("launch on the FUSE site while it answers: %d %s", code, body)
	}
	srv.Hang()
	// The server takes the signal asynchronously: launches answered 200 until it hangs,
	// then every one is refused at its deadline. A liveness bound, not a timing
	// assertion: each call must answer at all.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	refused := 0
	for i := 1; refused < 3; i++ {
		req, _ := http.NewRequestWithContext(ctx, "POST", "http://sandboxd/v1/launch",
			strings.NewReader(`{"site":"runs","deadline":"500ms","need_bytes":0}`))
		resp, err := td.http.Do(req)
		if err != nil {
			t.Fatalf("launch %d on a hung FUSE site: no answer (the hung mount holds the call): %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var p api.Problem
		json.Unmarshal(b, &p)
		if resp.StatusCode == 200 && refused == 0 {
			continue // the server has not taken the signal yet
		}
		if resp.StatusCode != http.StatusServiceUnavailable || p.Code != api.CodeBusy || resp.Header.Get("Retry-After") == "" ||
			!strings.Contains(p.Detail, "the call's deadline (500ms) passed before statfs answered") {
			t.Fatalf("launch %d on a hung FUSE site: %d Retry-After %q: %s", i, resp.StatusCode, resp.Header.Get("Retry-After"), b)
		}
		refused++
	}
	if n := inlineOn(td, mnt); n != 0 {
		t.Errorf("%d measurements of the FUSE site ran on the caller's goroutine, want none", n)
	}
}

// inlineOn is how many measurements of the filesystem that holds path ran inline.
func inlineOn(td *testDaemon, path string) uint64 {
	_, n := td.d.current().pressure.MeasureCounts(path)
	return n
}

// TestLaunchOnALocalSiteMeasuresInline: a launch on a site on a tmpfs (under this
// machine's ext4 root) measures on its own goroutine, no hand-off: each of 5 launches
// adds at least one inline measurement (a launch that finds a drain at work on its site
// measures twice), none is handed off, and the answer's figures are those of the tmpfs.
// The sampler is slowed to an hour so that its own (handed-off) samples stay out of the
// count.
func TestLaunchOnALocalSiteMeasuresInline(t *testing.T) {
	mnt, _, body := siteOnTmpfs(t, 16<<20, 0, "")
	td := startDaemon(t, body, func(o *Options) { o.Config.Health.SampleInterval = time.Hour })
	// The start-up's own measurements first: counts that hold still for 100 ms.
	counts := func() (int64, int64) {
		s, i := td.d.current().pressure.MeasureCounts(mnt)
		return int64(s), int64(i)
	}
	started0, inline0 := counts()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		s, i := counts()
		if s == started0 && i == inline0 {
			break
		}
		started0, inline0 = s, i
	}
	for i := 0; i < 5; i++ {
		code, _, raw := td.do(t, "POST", "/v1/launch", `{"need_bytes":0}`)
		var r api.LaunchResponse
		json.Unmarshal([]byte(raw), &r)
		if code != 200 || r.Filesystem == nil || r.Filesystem.Path != mnt || r.Filesystem.FSType != "tmpfs" {
			t.Fatalf("launch on a tmpfs site: %d %s", code, raw)
		}
	}
	started, inline := counts()
	if n := inline - inline0; n < 5 {
		t.Errorf("%d inline measurements over 5 launches on a tmpfs site, want at least one each", n)
	}
	if handed := (started - started0) - (inline - inline0); handed != 0 {
		t.Errorf("%d of the launches' measurements of a tmpfs site were handed off, want none", handed)
	}
}

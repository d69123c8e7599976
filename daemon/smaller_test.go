package daemon

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// One refusal never says "pruned 252 files" and "nothing was deleted" (issue 23 item 8):
// the site's retention pruned its expired entries, and what deleted nothing is reclaim,
// which an impossible need does not run.
func TestImpossibleNeedAfterAPruneSaysWhoDeletedNothing(t *testing.T) {
	_, _, body := siteOnTmpfs(t, 16<<20, 0, "")
	td := startDaemon(t, body)
	status, _, p := launch(t, td, `{"need_bytes":"1TiB"}`)
	if status != 507 || p.Code != api.CodeDiskFull {
		t.Fatalf("%d %s: %s", status, p.Code, p.Detail)
	}
	if !strings.Contains(p.Detail, "files (0 B) in this call") || !strings.Contains(p.Detail, "reclaim deleted nothing") ||
		strings.Contains(p.Detail, "nothing was deleted") {
		t.Errorf("detail: %s", p.Detail)
	}
}

// A site's bytes are what its entries hold on disk, the measure reclaim reports (issue 23
// item 8: status said 1.0 MiB apparent where reclaim freed 45.9 MiB allocated).
func TestSiteBytesAreAllocated(t *testing.T) {
	_, site, body := siteOnTmpfs(t, 16<<20, 0, "")
	td := startDaemon(t, body)
	var want int64
	for i := 0; i < 20; i++ {
		p := filepath.Join(site, fmt.Sprintf("j%02d.out", i))
		if err := os.WriteFile(p, []byte("ten bytes!"), 0o644); err != nil {
			t.Fatal(err)
		}
		var st syscall.Stat_t
		syscall.Stat(p, &st)
		want += st.Blocks * 512
	}
	var got api.Site
	// Waited for until the index has settled its lstats (a file just written is counted
	// before its size is known); apparent sizes would never reach want.
	poll(t, time.Minute, fmt.Sprintf("the site to hold 20 files and %d bytes (st_blocks × 512, as du and reclaim count, not 200 B apparent)", want), func() bool {
		st, err := td.client.Status(t.Context())
		if err != nil || len(st.Sites) != 1 {
			return false
		}
		got = st.Sites[0]
		return got.Files == 20 && got.Bytes == want
	})
}

// A job's registration and end are one log line each, the event log's (issue 23 item 8:
// every job event was logged twice).
func TestJobEventsLoggedOnce(t *testing.T) {
	root := testenv.CgroupRoot(t)
	_, _, body := siteOnTmpfs(t, 16<<20, 0, fmt.Sprintf("[jobs]\ncgroup_root = %q\ngrace = \"1s\"\n", root))
	var logs testenv.SyncBuffer
	td := startDaemon(t, body, func(o *Options) { o.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	ttl := api.Duration(time.Minute)
	if _, err := td.client.RegisterJob(t.Context(), api.JobRequest{ID: "once1", PID: sleeper(t), TTL: &ttl}); err != nil {
		t.Fatal(err)
	}
	if _, err := td.client.EndJob(t.Context(), "once1", true, time.Second); err != nil {
		t.Fatal(err)
	}
	lines := func(substr string) int {
		n := 0
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "once1") && strings.Contains(l, substr) {
				n++
			}
		}
		return n
	}
	// The end's event may be logged just after the answer: wait for it, then stop the
	// daemon so that a second line, if any, is written before the count.
	poll(t, time.Minute, "the job's end in the log", func() bool { return lines("job killed") > 0 })
	td.stop()
	for _, s := range []string{"job registered", "ending job", "job killed"} {
		if n := lines(s); n != 1 {
			t.Errorf("%q: %d log lines, want 1:\n%s", s, n, logs.String())
		}
	}
}

package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/reclaim"
)

// floodAs makes n POST path calls over 8 connections from a child running as uid, and
// answers how many got each status.
func floodAs(t *testing.T, td *testDaemon, uid uint32, path string, n int) string {
	t.Helper()
	helper := filepath.Join(td.dir, "helper.test")
	if _, err := os.Stat(helper); err != nil {
		if b, err := os.ReadFile(os.Args[0]); err != nil || os.WriteFile(helper, b, 0o755) != nil {
			t.Fatalf("copy test binary: %v", err)
		}
	}
	cmd := exec.Command(helper, "-test.run=^TestHelperFlood$")
	cmd.Dir = td.dir
	cmd.Env = append(os.Environ(), "SANDBOXD_FLOOD="+strconv.Itoa(n)+" "+path, "SANDBOXD_HELPER_SOCKET="+td.sock)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("flood as uid %d: %v\n%s", uid, err, out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if s, ok := strings.CutPrefix(l, "STATUSES "); ok {
			return s
		}
	}
	t.Fatalf("flood printed no statuses:\n%s", out)
	return ""
}

// TestHelperFlood is the child of floodAs.
func TestHelperFlood(t *testing.T) {
	spec := os.Getenv("SANDBOXD_FLOOD")
	if spec == "" {
		t.Skip("helper process only")
	}
	ns, path, _ := strings.Cut(spec, " ")
	n, _ := strconv.Atoi(ns)
	sock := os.Getenv("SANDBOXD_HELPER_SOCKET")
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return net.Dial("unix", sock)
	}}}
	var mu sync.Mutex
	counts := map[int]int{}
	work := make(chan struct{}, n)
	for i := 0; i < n; i++ {
		work <- struct{}{}
	}
	close(work)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range work {
				resp, err := c.Post("http://sandboxd"+path, "application/json", strings.NewReader("{}"))
				code := -1
				if err == nil {
					code = resp.StatusCode
					resp.Body.Close()
				}
				mu.Lock()
				counts[code]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	fmt.Printf("STATUSES %v\n", counts)
}

// TestRefusalFloodKeepsTrail (issue 13 item 4): 2,000 refused POST /v1/reclaim calls
// from uid 65534 leave a handful of refusal events (one at once, the rest counted in one
// event per 10 s window) and a handful of WARN lines, and the earlier lifecycle and
// reserve events are still in /v1/events.
func TestRefusalFloodKeepsTrail(t *testing.T) {
	t.Parallel() // long, and mostly waiting: see "Parallel tests" in harness_test.go
	testenv.RequireRoot(t)
	mnt := testenv.Tmpfs(t, 64<<20, 0)
	var logs testenv.SyncBuffer
	td := startDaemon(t, fmt.Sprintf("site = []\n[[filesystem]]\npath = %q\nreserve = \"1MiB\"\nreclaim_below = \"1MiB\"\nreplace_below = \"0\"\n", mnt),
		func(o *Options) { o.Logger = slogTo(&logs) })
	poll(t, time.Minute, "the ready and reserve events", func() bool {
		return len(td.eventsWith(t, api.EventReserve, "armed")) == 1 && len(td.eventsWith(t, api.EventLifecycle, "ready")) == 1
	})
	// A prune-sized flood of the main ring: every earlier event must survive in the kept ring.
	for i := 0; i < 1500; i++ {
		td.d.events.Record(api.Event{Kind: api.EventPrune, Subject: "flood", Message: "pruned 1 file"})
	}

	began := time.Now()
	if got := floodAs(t, td, 65534, "/v1/reclaim", 2000); got != "map[403:2000]" {
		t.Fatalf("flood answers %s, want 2,000 × 403", got)
	}
	// The refusals of one 10 s window are one event: a flood within one window (as on an
	// idle machine) is the first refusal and one "1,999 more like this"; one that a loaded
	// machine stretches over more windows has one coalesced event per window it spans (CI
	// saw 3 events right after a flood that took over 20 s). Either way every refusal is
	// counted, in at most 1 + took/window coalesced events.
	took := time.Since(began)
	windows := 1 + int(took/refusalInterval)
	evs := td.events(t)
	if !hasEvent(evs, api.EventLifecycle, "daemon starting") || !hasEvent(evs, api.EventLifecycle, "ready") ||
		!hasEvent(evs, api.EventReserve, "armed") {
		for _, e := range evs {
			if e.Kind != api.EventPrune {
				t.Logf("kept: %d %s %s", e.Seq, e.Kind, e.Message)
			}
		}
		t.Errorf("lifecycle or reserve events pushed out of the trail by the flood")
	}
	refusals := func(evs []api.Event) (first int, coalesced []api.Event) {
		for _, e := range evs {
			switch {
			case e.Kind != api.EventRefusal:
			case e.Fields["coalesced"] == true:
				coalesced = append(coalesced, e)
			default:
				first++
			}
		}
		return first, coalesced
	}
	if first, coalesced := refusals(evs); first != 1 || len(coalesced) > windows-1 {
		t.Errorf("right after a flood of %s: %d refusal events and %d coalesced ones, want 1 and at most %d (the rest are counted when the window ends)",
			took.Round(time.Millisecond), first, len(coalesced), windows-1)
	}
	// An event is in the ring before its log line is written (eventLog.append logs after
	// releasing its lock): the wait is for every refusal to be counted and for the lines.
	var coalesced []api.Event
	poll(t, time.Minute, "the coalesced refusal events and their log lines", func() bool {
		_, coalesced = refusals(td.events(t))
		n := 1
		for _, e := range coalesced {
			c, _ := e.Fields["count"].(float64)
			n += int(c)
		}
		return n >= 2000 && strings.Count(logs.String(), " more like this") >= len(coalesced)
	})
	n := 1
	for _, e := range coalesced {
		if c, _ := e.Fields["count"].(float64); c < 1 || e.Fields["uid"] != float64(65534) || !strings.Contains(e.Message, api.FormatCount(uint64(c))+" more like this") {
			t.Errorf("coalesced event %q fields %+v; want a count of at least 1 that the message names, uid 65534", e.Message, e.Fields)
		}
		c, _ := e.Fields["count"].(float64)
		n += int(c)
	}
	if n != 2000 || len(coalesced) < 1 || len(coalesced) > windows {
		t.Errorf("%d refusals counted in 1 + %d events, want 2,000 in 1 + 1..%d (a flood of %s, one event per %s window)",
			n, len(coalesced), windows, took.Round(time.Millisecond), refusalInterval)
	}
	if n := strings.Count(logs.String(), "level=WARN msg=\"refused a mutating call"); n != 1 {
		t.Errorf("%d WARN lines for the first refusal, want 1", n)
	}
	if n := strings.Count(logs.String(), " more like this"); n != len(coalesced) {
		t.Errorf("%d log lines for the coalesced refusals, want one per coalesced event (%d)", n, len(coalesced))
	}
	page, _ := td.client.Events(context.Background(), 0)
	if !page.Dropped {
		t.Error("the trail does not say that events were dropped (1,500 prunes went through a ring of 1,000)")
	}
}

// TestEventsLoggedOnceEach (issue 14 item 7): a component's event is one log line with both
// its component and its seq; an applied reload is one INFO line; a rejected reload is one ERROR
// line and no INFO line.
func TestEventsLoggedOnceEach(t *testing.T) {
	var logs testenv.SyncBuffer
	dir := t.TempDir()
	td := startDaemon(t, noSites(dir), func(o *Options) { o.Logger = slogTo(&logs) })
	// An event is in the ring before its log line is written (eventLog.append logs after
	// releasing its lock), and /readyz answers 200 before the supervisor records "ready" and
	// starts the start-up reclaim, whose run is a line too: wait for that last line of the
	// start-up, so that the reload below is the only writer of the lines it counts.
	poll(t, time.Minute, "the reserve armed and the start-up reclaim logged", func() bool {
		l := logs.String()
		return len(td.eventsWith(t, api.EventReserve, "armed")) > 0 && strings.Contains(l, "kind=reserve") &&
			strings.Contains(l, "kind="+api.EventReclaimRun+" subject="+reclaim.TriggerStartup)
	})
	var lines []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "kind=reserve") && strings.Contains(l, "armed") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 || !strings.Contains(lines[0], "component=reclaim") || !strings.Contains(lines[0], "seq=") {
		t.Errorf("the reserve event logged as %q; want one line with component= and seq=", lines)
	}

	// A reload that is applied is one INFO line too, the config event (QA saw it twice).
	before := len(logs.String())
	if err := td.d.Reload(); err != nil {
		t.Fatal(err)
	}
	after := logs.String()[before:]
	if strings.Count(after, "\n") != 1 || !strings.Contains(after, "level=INFO") || !strings.Contains(after, "config reloaded") ||
		!strings.Contains(after, "kind=config") {
		t.Errorf("an applied reload logged %q; want one INFO line, the config event", after)
	}

	good, _ := os.ReadFile(td.d.opts.ConfigPath)
	os.WriteFile(td.d.opts.ConfigPath, []byte(string(good)+"\nbogus = 1\n"), 0o644)
	before = len(logs.String())
	if err := td.d.Reload(); err == nil {
		t.Fatal("a broken file was accepted")
	}
	after = logs.String()[before:]
	if strings.Count(after, "\n") != 1 || !strings.Contains(after, "level=ERROR") || !strings.Contains(after, "rejected") {
		t.Errorf("a rejected reload logged %q; want one ERROR line", after)
	}
}

// slogTo is a text logger at debug level writing to w.
func slogTo(w *testenv.SyncBuffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

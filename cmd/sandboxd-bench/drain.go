package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/client"
)

// runDrain times the daemon as shipped draining a site: it starts the daemon command
// (after "--") on a site already full of expired files and measures from the exec until
// the site's filesystem has given back -files inodes (statfs, a few µs a poll: no
// listing of the directory, no status call whose answer may be cached), while a
// launcher calls POST /v1/launch every -launch-every (each call prunes up to its own
// budget, as it does in production). It prints one result line: the drain's
// wall time (value, ms) and the launch latencies; the daemon's events about it go to
// stderr. The daemon may add -allow inodes of its own (the reserve file), so the end is
// when at most that many are left above the count without the site's entries. The filesystem must hold nothing else that changes (a tmpfs or loop mount of
// the benchmark's own).
func runDrain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("drain", stderr)
	var r Result
	fs.StringVar(&r.Test, "test", "", "test name recorded in the result")
	fs.StringVar(&r.Target, "target", "sandboxd", "target name recorded in the result")
	fs.IntVar(&r.Round, "round", 0, "round number recorded in the result")
	dir := fs.String("dir", "", "the site directory (required)")
	files := fs.Int("files", 0, "entries in the site, all expired (required)")
	socket := fs.String("socket", "", "the daemon's socket (required)")
	site := fs.String("site", "bench", "the site's name, for the launch calls")
	timeout := fs.Duration("timeout", 30*time.Minute, "give up after this long")
	allow := fs.Int("allow", 1, "inodes the daemon itself may add to the filesystem (its reserve file)")
	listing := fs.Bool("by-listing", false, "read the end from the site's listing every 100 ms, not statfs (a filesystem others write to, such as the root disk)")
	every := fs.Duration("launch-every", 200*time.Millisecond, "one launch call this often (a launcher's pace); each prunes what it may itself")
	if err := fs.Parse(args); err != nil {
		return err
	}
	argv := fs.Args()
	if *dir == "" || *files <= 0 || *socket == "" || len(argv) == 0 {
		return errors.New("usage: drain -dir SITE -files N -socket S [-test T] -- SANDBOXD serve ARGS")
	}
	used := func() (uint64, error) {
		if *listing {
			f, err := os.Open(*dir)
			if err != nil {
				return 0, err
			}
			names, err := f.Readdirnames(-1)
			f.Close()
			return uint64(len(names)) + uint64(*files), err // so that the goal below is "empty"
		}
		var st syscall.Statfs_t
		if err := syscall.Statfs(*dir, &st); err != nil {
			return 0, err
		}
		return st.Files - st.Ffree, nil
	}
	before, err := used()
	if err != nil {
		return err
	}
	goal := before - uint64(*files) + uint64(*allow)

	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = stderr, stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	}()

	tr := &http.Transport{DialContext: client.DialUnix(*socket), DisableCompression: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	done := make(chan struct{})
	lats := make(chan []time.Duration, 1)
	var nerr int
	var firstErr string
	go func() {
		var ls []time.Duration
		defer func() { lats <- ls }()
		body := fmt.Sprintf(`{"site":%q}`, *site)
		for {
			select {
			case <-done:
				return
			default:
			}
			t0 := time.Now()
			code, b, err := post(ctx, hc, "/v1/launch", body)
			switch {
			case err != nil && !strings.Contains(err.Error(), "connect"):
				nerr++
				if firstErr == "" {
					firstErr = err.Error()
				}
			case err != nil: // not listening yet
				sleep(ctx, 5*time.Millisecond)
			default:
				ls = append(ls, time.Since(t0))
				sleep(ctx, *every-time.Since(t0))
				if code != http.StatusOK {
					nerr++
					if firstErr == "" {
						firstErr = fmt.Sprintf("%d: %.200s", code, b)
					}
				}
			}
			if ctx.Err() != nil {
				return
			}
		}
	}()

	var elapsed time.Duration
	for {
		u, err := used()
		if err != nil {
			close(done)
			return err
		}
		if u <= goal {
			elapsed = time.Since(start)
			break
		}
		select {
		case err := <-exited:
			close(done)
			return fmt.Errorf("the daemon exited before the site was drained: %v", err)
		case <-ctx.Done():
			close(done)
			return fmt.Errorf("site not drained after %v: %d inodes still in use, want %d", *timeout, u, goal)
		case <-time.After(map[bool]time.Duration{true: 100 * time.Millisecond, false: 2 * time.Millisecond}[*listing]):
		}
	}
	close(done)
	ls := <-lats
	r.N, r.Errors, r.FirstErr = len(ls), nerr, firstErr
	r.Seconds = elapsed.Seconds()
	r.Value, r.Unit = float64(elapsed.Nanoseconds())/1e6, "ms"
	if len(ls) > 0 {
		slices.Sort(ls)
		us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
		r.P50us, r.P90us, r.P99us, r.MaxUs = us(pct(ls, .5)), us(pct(ls, .9)), us(pct(ls, .99)), us(ls[len(ls)-1])
		r.Method, r.Path, r.Clients = http.MethodPost, "/v1/launch", 1
	}
	reportDrainEvents(ctx, hc, stderr)
	return json.NewEncoder(stdout).Encode(r)
}

// reportDrainEvents prints how many events the drain left in the audit trail and the
// prune events themselves (one per drain, plus progress reports).
func reportDrainEvents(ctx context.Context, hc *http.Client, w io.Writer) {
	b, err := get(ctx, hc, "/v1/events?since=0")
	if err != nil {
		fmt.Fprintf(w, "  events: %v\n", err)
		return
	}
	var page api.EventsPage
	if err := json.Unmarshal(b, &page); err != nil {
		fmt.Fprintf(w, "  events: %v\n", err)
		return
	}
	prunes := 0
	for _, e := range page.Events {
		if e.Kind == api.EventPrune {
			prunes++
			fmt.Fprintf(w, "  event %d prune: %s\n", e.Seq, e.Message)
		}
	}
	fmt.Fprintf(w, "  events in the trail: %d, of them prune: %d\n", len(page.Events), prunes)
}

func post(ctx context.Context, hc *http.Client, path, body string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://sandboxd"+path, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// drainChecks are section 3d's figures: the daemon process draining 100,000 expired
// files, against find -mmin +720 -delete (by age, as the daemon prunes) and plain find
// -delete on identical copies, per filesystem.
func drainChecks(st map[key]*stat) []check {
	var cs []check
	for _, fsys := range []string{"tmpfs", "ext4"} {
		d, f := key{"drain-" + fsys + "-default", "sandboxd"}, key{"drain-" + fsys + "-default", "find"}
		c := ratio(st, "drain of 100,000 expired files, "+fsys+", default drain_rate 500/s", "(info: 200 s by design)", d, f,
			func(s *stat) float64 { return s.value }, fmtMs, 0, true)
		c.Pass = info(c.Pass)
		cs = append(cs, c,
			absolute(st, "launch p99 during that drain, "+fsys, "< 10 ms", d, func(s *stat) float64 { return s.p99 }, 10000))
		for _, m := range []struct {
			mode, what, target string
			lim                float64
		}{
			{"rate0", "drain_rate = 0", "≤ 1.2× find", 1.2},
			{"pressure", "InodePressure, default drain_rate", "≤ 1.5× find", 1.5},
		} {
			d, f := key{"drain-" + fsys + "-" + m.mode, "sandboxd"}, key{"drain-" + fsys + "-" + m.mode, "find"}
			cs = append(cs, ratio(st, "drain of 100,000 expired files, "+fsys+", "+m.what, m.target, d, f,
				func(s *stat) float64 { return s.value }, fmtMs, m.lim, true))
			// The same against find -delete with no age test (no stat of its own): what
			// deleting every entry costs, the floor for a prune that must look at ages.
			plain := key{"drain-" + fsys + "-" + m.mode, "find-delete"}
			cs = append(cs, ratio(st, "the same against plain find -delete (no age test)", m.target+" -delete", d, plain,
				func(s *stat) float64 { return s.value }, fmtMs, m.lim, true))
			c := absolute(st, "launch p99 during that drain, "+fsys+", "+m.what, "(info)", d, func(s *stat) float64 { return s.p99 }, 0)
			c.Pass = info(c.Pass)
			cs = append(cs, c)
		}
	}
	return cs
}

func fmtMs(ms float64) string { return fmt.Sprintf("%.0f ms", ms) }

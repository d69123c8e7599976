package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/client"
)

// Result is one load run: one line of bench-results/results.jsonl.
type Result struct {
	Test     string  `json:"test"`
	Target   string  `json:"target"`
	Round    int     `json:"round"`
	Method   string  `json:"method"`
	Path     string  `json:"path"`
	Clients  int     `json:"clients"`
	Fresh    bool    `json:"fresh_connections"`
	Seconds  float64 `json:"seconds"`
	N        int     `json:"n"`
	Errors   int     `json:"errors"`
	FirstErr string  `json:"first_error,omitempty"`
	P50us    float64 `json:"p50_us"`
	P90us    float64 `json:"p90_us"`
	P99us    float64 `json:"p99_us"`
	MaxUs    float64 `json:"max_us"`
	MeanUs   float64 `json:"mean_us"`
	RPS      float64 `json:"rps"`
	// Matched counts answers whose body contains -count (e.g. `"cached":true`), so a
	// run can prove which path of the server it measured.
	Matched int `json:"matched,omitempty"`
	// Gzip says the client asked for gzip (-gzip: Accept-Encoding: gzip, decoded by Go's
	// Transport as its default does); Gzipped counts the measured answers that came
	// gzip-coded, so a run proves which form of the answer it measured.
	Gzip    bool `json:"gzip,omitempty"`
	Gzipped int  `json:"gzipped,omitempty"`
	// ServerCPUus and ClientCPUus are the CPU time (user+system) the server process (with
	// -server-pid) and this load client spent per measured answer; PerCPUSecond is the
	// answers per second of their summed CPU: the throughput the pair would reach on one
	// core of its own, which a busy machine moves far less than RPS.
	ServerCPUus  float64 `json:"server_cpu_us,omitempty"`
	ClientCPUus  float64 `json:"client_cpu_us,omitempty"`
	PerCPUSecond float64 `json:"per_cpu_second,omitempty"`
	// Value is a figure that is not a latency (RSS, CPU, a tool's run time); see Unit.
	Value float64 `json:"value,omitempty"`
	Unit  string  `json:"unit,omitempty"`
}

type loadConfig struct {
	socket, method, path, body, count string
	prime                             string
	clients, requests                 int
	serverPid, clkTck                 int
	duration, warmup, timeout         time.Duration
	fresh, gzip                       bool
}

func runLoad(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("load", stderr)
	var c loadConfig
	var res Result
	fs.StringVar(&c.socket, "socket", "", "Unix socket of the server (required)")
	fs.StringVar(&c.method, "method", "GET", "HTTP method")
	fs.StringVar(&c.path, "path", "/livez", "request path")
	fs.StringVar(&c.body, "body", "", "request body (sent with Content-Type: application/json)")
	fs.StringVar(&c.count, "count", "", "count answers whose body contains this string")
	fs.IntVar(&c.clients, "clients", 1, "concurrent clients, each with its own connection")
	fs.IntVar(&c.requests, "requests", 0, "stop after this many measured requests (0: run for -duration)")
	fs.DurationVar(&c.duration, "duration", 2*time.Second, "measured time")
	fs.DurationVar(&c.warmup, "warmup", 200*time.Millisecond, "unmeasured time first (connections, caches)")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "per-request timeout")
	fs.StringVar(&c.prime, "prime", "", "GET this path once per client first, unmeasured, to open the connection")
	fs.BoolVar(&c.gzip, "gzip", false, "ask for gzip and decode it, as Go's default Transport does (default: identity, as curl, Node's http and Python's http.client ask)")
	fs.BoolVar(&c.fresh, "fresh", false, "a new connection per request (as the CLI makes), not keep-alive")
	fs.IntVar(&c.serverPid, "server-pid", 0, "also measure this server process's CPU per answer (and the client's own)")
	fs.IntVar(&c.clkTck, "clk-tck", 100, "clock ticks per second (getconf CLK_TCK), for -server-pid")
	fs.StringVar(&res.Test, "test", "", "test name recorded in the result")
	fs.StringVar(&res.Target, "target", "", "target name recorded in the result (sandboxd, bare, ...)")
	fs.IntVar(&res.Round, "round", 0, "round number recorded in the result")
	cpuProfile := fs.String("cpuprofile", "", "write the load client's CPU profile here (go tool pprof), e.g. to see what decoding costs")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if c.socket == "" || c.clients < 1 {
		return errors.New("-socket is required and -clients must be at least 1")
	}
	out, err := load(ctx, c)
	if err != nil {
		return err
	}
	out.Test, out.Target, out.Round = res.Test, res.Target, res.Round
	return json.NewEncoder(stdout).Encode(out)
}

// load runs c.clients goroutines, each sending requests back to back on its own
// connection; latency is from just before the request is written to the last byte of
// the body read. With -requests the run ends after that many measured answers, else
// after -duration; requests during the warmup are not measured.
func load(ctx context.Context, c loadConfig) (Result, error) {
	tr := &http.Transport{
		DialContext:         client.DialUnix(c.socket),
		MaxIdleConnsPerHost: c.clients,
		DisableKeepAlives:   c.fresh,
		DisableCompression:  !c.gzip,
	}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: c.timeout}
	count := []byte(c.count)

	type tally struct {
		lats     []time.Duration
		errs     int
		firstErr string
		matched  int
		gzipped  int
	}
	var measuring atomic.Bool
	measuring.Store(c.warmup <= 0)
	var issued atomic.Int64 // measured requests started, for -requests
	stop := make(chan struct{})
	tallies := make(chan tally, c.clients)
	for i := 0; i < c.clients; i++ {
		go func() {
			t := tally{lats: make([]time.Duration, 0, 4096)}
			defer func() { tallies <- t }()
			if c.prime != "" {
				once(ctx, hc, loadConfig{method: http.MethodGet, path: c.prime})
			}
			for {
				select {
				case <-stop:
					return
				default:
				}
				on := measuring.Load()
				if on && c.requests > 0 && issued.Add(1) > int64(c.requests) {
					return
				}
				d, body, gz, err := once(ctx, hc, c)
				switch {
				case !on:
				case err != nil:
					t.errs++
					if t.firstErr == "" {
						t.firstErr = err.Error()
					}
				default:
					if len(count) > 0 && bytes.Contains(body, count) {
						t.matched++
					}
					if gz {
						t.gzipped++
					}
					t.lats = append(t.lats, d)
				}
				if ctx.Err() != nil {
					return
				}
			}
		}()
	}
	if c.warmup > 0 {
		sleep(ctx, c.warmup)
		measuring.Store(true)
	}
	start := time.Now()
	cpu0, cpuErr := cpuNow(c)
	if c.requests == 0 {
		sleep(ctx, c.duration)
		close(stop)
	}
	var all tally
	for i := 0; i < c.clients; i++ {
		t := <-tallies
		all.lats = append(all.lats, t.lats...)
		all.errs += t.errs
		all.matched += t.matched
		all.gzipped += t.gzipped
		if all.firstErr == "" {
			all.firstErr = t.firstErr
		}
	}
	elapsed := time.Since(start)
	cpu1, cpuErr1 := cpuNow(c)
	if ctx.Err() != nil {
		return Result{}, ctx.Err()
	}
	r := summarize(c, all.lats, all.errs, all.firstErr, all.matched, elapsed)
	r.Gzip, r.Gzipped = c.gzip, all.gzipped
	if c.serverPid > 0 && cpuErr == nil && cpuErr1 == nil && r.N > 0 {
		r.ServerCPUus = (cpu1.server - cpu0.server).Seconds() * 1e6 / float64(r.N)
		r.ClientCPUus = (cpu1.client - cpu0.client).Seconds() * 1e6 / float64(r.N)
		if sum := r.ServerCPUus + r.ClientCPUus; sum > 0 {
			r.PerCPUSecond = 1e6 / sum
		}
	}
	return r, nil
}

// once makes one request; gz says the answer came gzip-coded (and was decoded).
func once(ctx context.Context, hc *http.Client, c loadConfig) (d time.Duration, b []byte, gz bool, err error) {
	var body io.Reader
	if c.body != "" {
		body = strings.NewReader(c.body)
	}
	req, err := http.NewRequestWithContext(ctx, c.method, "http://sandboxd"+c.path, body)
	if err != nil {
		return 0, nil, false, err
	}
	if c.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	t0 := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, false, err
	}
	b, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	d = time.Since(t0)
	if err != nil {
		return 0, nil, false, err
	}
	if resp.StatusCode/100 != 2 {
		return 0, nil, false, fmt.Errorf("%s %s: %d: %.300s", c.method, c.path, resp.StatusCode, b)
	}
	return d, b, resp.Uncompressed, nil
}

func summarize(c loadConfig, lats []time.Duration, nerr int, firstErr string, matched int, elapsed time.Duration) Result {
	r := Result{Method: c.method, Path: c.path, Clients: c.clients, Fresh: c.fresh,
		Seconds: elapsed.Seconds(), N: len(lats), Errors: nerr, FirstErr: firstErr, Matched: matched}
	if len(lats) == 0 {
		return r
	}
	slices.Sort(lats)
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	var sum time.Duration
	for _, d := range lats {
		sum += d
	}
	r.P50us = us(pct(lats, 0.50))
	r.P90us = us(pct(lats, 0.90))
	r.P99us = us(pct(lats, 0.99))
	r.MaxUs = us(lats[len(lats)-1])
	r.MeanUs = us(sum / time.Duration(len(lats)))
	r.RPS = float64(len(lats)) / elapsed.Seconds()
	return r
}

// pct is the nearest-rank percentile of sorted durations.
func pct(sorted []time.Duration, p float64) time.Duration {
	i := int(float64(len(sorted))*p+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

type cpuTimes struct{ server, client time.Duration }

// cpuNow reads the server's CPU time from /proc and the client's own from getrusage
// (every goroutine of this process is the load client).
func cpuNow(c loadConfig) (cpuTimes, error) {
	if c.serverPid <= 0 {
		return cpuTimes{}, nil
	}
	ticks, err := cpuTicks(fmt.Sprintf("/proc/%d", c.serverPid))
	if err != nil {
		return cpuTimes{}, err
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return cpuTimes{}, err
	}
	return cpuTimes{
		server: time.Duration(ticks) * time.Second / time.Duration(max(c.clkTck, 1)),
		client: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()),
	}, nil
}

package main

import (
	"fmt"
	"math"
)

// buildChecks turns the medians into the brief's figures (docs/benchmarks.md lists them
// with their reasons). A figure whose data is missing says "n/a", never "pass".
func buildChecks(st map[key]*stat) []check {
	p50 := func(s *stat) float64 { return s.p50 }
	p99 := func(s *stat) float64 { return s.p99 }
	rps := func(s *stat) float64 { return s.rps }
	var cs []check
	var c check

	// 1. HTTP over the Unix socket, sandboxd vs a bare net/http handler.
	for _, ep := range []struct{ test, name string }{{"http-livez", "/livez"}, {"http-status", "GET /v1/status"}} {
		a, b := key{ep.test + "-c1", "sandboxd"}, key{ep.test + "-c1", "bare"}
		cs = append(cs,
			ratio(st, ep.name+" p50, 1 client", "≤ 1.5× bare", a, b, p50, fmtUs, 1.5, true),
			ratio(st, ep.name+" p99, 1 client", "≤ 2× bare", a, b, p99, fmtUs, 2, true))
		a, b = key{ep.test + "-c32", "sandboxd"}, key{ep.test + "-c32", "bare"}
		cs = append(cs, ratio(st, ep.name+" throughput, 32 clients", "≥ 0.7× bare", a, b, rps, fmtRPS, 0.7, false))
	}
	for _, x := range []struct {
		what string
		a, b key
		f    func(*stat) float64
		fmt  func(float64) string
	}{
		{"GET /v1/status p50, 1 client, vs bare answering the same bytes", key{"http-status-c1", "sandboxd"}, key{"http-status-c1", "bare-samebody"}, p50, fmtUs},
		{"GET /v1/status throughput, 32 clients, vs bare answering the same bytes", key{"http-status-c32", "sandboxd"}, key{"http-status-c32", "bare-samebody"}, rps, fmtRPS},
	} {
		c := ratio(st, x.what, "(info)", x.a, x.b, x.f, x.fmt, 0, true)
		c.Pass = info(c.Pass)
		cs = append(cs, c)
	}
	a, b := key{"http-livez-fresh-c1", "sandboxd"}, key{"http-livez-fresh-c1", "bare"}
	c = ratio(st, "/livez p50, 1 client, new connection per call", "(info)", a, b, p50, fmtUs, 0, true)
	c.Pass = info(c.Pass)
	cs = append(cs, c)

	// 2. Idle daemon on the default config.
	cs = append(cs,
		limit(st, "idle RSS after start-up", "< 20 MiB", key{"idle-rss", "sandboxd"}, 20, "MiB"),
		limit(st, "idle CPU (BENCH_IDLE, 60 s)", "< 0.5% of a core", key{"idle-cpu", "sandboxd"}, 0.5, "%"))

	// 3. Launch on a site of 16,381 unexpired entries.
	cs = append(cs, ratio(st, "launch p50 vs /livez p50 (16,381 entries)", "≤ 2× /livez",
		key{"launch16k", "launch"}, key{"launch16k", "livez"}, p50, fmtUs, 2, true))
	cs = append(cs, speedup(st, "launch p50 vs find -mmin +720 -delete (same dir)", "≥ 100× faster",
		key{"launch16k", "launch"}, key{"find16k", "find"}, 100))
	cs = append(cs, absolute(st, "launch p99 under 1,000 entries/s churn (max_age 2s)", "< 5 ms",
		key{"launch-churn", "launch"}, p99, 5000))
	c = absolute(st, "launch p99 while a backlog of 16,381 expired entries drains, with churn", "(info)",
		key{"launch-backlog", "launch"}, p99, 0)
	c.Pass = info(c.Pass)
	cs = append(cs, c)

	// 4. Resume on a healthy box (never cached since issue 10).
	cs = append(cs,
		ratio(st, "resume p50, healthy, measured on every call vs /livez p50", "≤ 3× /livez",
			key{"resume", "resume"}, key{"resume", "livez"}, p50, fmtUs, 3, true),
		ratio(st, "resume, lone call (median of 5) vs a lone /livez call (median of 5)", "(info)",
			key{"resume-lone", "resume"}, key{"resume-lone", "livez-lone"}, p50, fmtUs, 0, true),
		ratio(st, "reclaim {dry_run:false} healthy p50 vs /livez p50", "≤ 3× /livez",
			key{"reclaim-healthy", "reclaim"}, key{"reclaim-healthy", "livez"}, p50, fmtUs, 3, true))
	cs[len(cs)-2].Pass = info(cs[len(cs)-2].Pass)
	return append(cs, drainChecks(st)...)
}

func info(p string) string {
	if p == "n/a" {
		return p
	}
	return "info"
}

// ratio is a/b of one field; lower says the limit is an upper bound on the ratio.
func ratio(st map[key]*stat, what, target string, a, b key, f func(*stat) float64,
	format func(float64) string, lim float64, lower bool) check {
	c := check{What: what, Target: target, Pass: "n/a"}
	sa, sb := st[a], st[b]
	if sa == nil || sb == nil || f(sb) == 0 || sa.n == 0 {
		return c
	}
	c.Measured, c.Versus = format(f(sa)), format(f(sb))
	c.Ratio = f(sa) / f(sb)
	if lower {
		c.Pass = verdict(c.Ratio <= lim)
	} else {
		c.Pass = verdict(c.Ratio >= lim)
	}
	return c
}

// speedup is how many launch calls fit in one run of the tool (tool ms / launch p50).
func speedup(st map[key]*stat, what, target string, launch, tool key, lim float64) check {
	c := check{What: what, Target: target, Pass: "n/a"}
	sl, sf := st[launch], st[tool]
	if sl == nil || sf == nil || sl.p50 == 0 || sf.value == 0 {
		return c
	}
	c.Measured, c.Versus = fmtUs(sl.p50), fmt.Sprintf("%.1f ms", sf.value)
	c.Ratio = sf.value * 1000 / sl.p50
	c.Pass = verdict(c.Ratio >= lim)
	return c
}

func absolute(st map[key]*stat, what, target string, k key, f func(*stat) float64, limUs float64) check {
	c := check{What: what, Target: target, Pass: "n/a"}
	s := st[k]
	if s == nil || s.n == 0 {
		return c
	}
	c.Measured = fmtUs(f(s))
	c.Versus = fmt.Sprintf("%d calls, %d errors", s.n, s.errors)
	c.Pass = verdict(f(s) < limUs && s.errors == 0)
	return c
}

func limit(st map[key]*stat, what, target string, k key, lim float64, unit string) check {
	c := check{What: what, Target: target, Pass: "n/a"}
	s := st[k]
	if s == nil {
		return c
	}
	c.Measured = fmt.Sprintf("%.3g %s", s.value, unit)
	c.Pass = verdict(s.value < lim)
	return c
}

func verdict(ok bool) string {
	if ok {
		return "pass"
	}
	return "FAIL"
}

func fmtUs(us float64) string {
	if math.Abs(us) < 1000 {
		return fmt.Sprintf("%.0f µs", us)
	}
	return fmt.Sprintf("%.2f ms", us/1000)
}

func fmtRPS(r float64) string { return fmt.Sprintf("%.0f req/s", r) }

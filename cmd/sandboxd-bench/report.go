package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
)

// stat is the median over rounds of one (test, target) pair.
type stat struct {
	rounds, n, errors int
	p50, p99, rps     float64 // µs, µs, answers/s
	value             float64 // for value results (ms, MiB, %)
	unit              string
	matched           int
	firstErr          string
}

type key struct{ test, target string }

// check is one line of the summary: a measured figure against the brief's target.
type check struct {
	What, Target     string
	Measured, Versus string
	Ratio            float64
	Pass             string // "pass", "FAIL", "n/a" (missing data), "info"
}

func runReport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("report", stderr)
	in := fs.String("in", "", "results.jsonl to read (required)")
	jsonOut := fs.String("json", "", "also write the checks as JSON to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *in == "" {
		return errors.New("-in is required")
	}
	stats, order, err := readStats(*in)
	if err != nil {
		return err
	}
	checks := buildChecks(stats)

	tw := tabwriter.NewWriter(stdout, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "test\ttarget\trounds\tn\terrors\tp50 µs\tp99 µs\treq/s\tvalue")
	for _, k := range order {
		s := stats[k]
		val := ""
		if s.unit != "" {
			val = fmt.Sprintf("%.3f %s", s.value, s.unit)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%.1f\t%.1f\t%.0f\t%s\n", k.test, k.target, s.rounds, s.n, s.errors, s.p50, s.p99, s.rps, val)
	}
	tw.Flush()
	fmt.Fprintln(stdout)
	tw = tabwriter.NewWriter(stdout, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "figure\ttarget\tmeasured\tversus\tratio\tverdict")
	for _, c := range checks {
		ratio := "-"
		if c.Ratio != 0 && !math.IsNaN(c.Ratio) {
			ratio = fmt.Sprintf("%.2f", c.Ratio)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", c.What, c.Target, c.Measured, c.Versus, ratio, c.Pass)
	}
	tw.Flush()
	for _, k := range order {
		if s := stats[k]; s.errors > 0 {
			fmt.Fprintf(stdout, "errors in %s/%s: %d, first: %s\n", k.test, k.target, s.errors, s.firstErr)
		}
	}
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(checks, "", "  ")
		return os.WriteFile(*jsonOut, append(b, '\n'), 0o644)
	}
	return nil
}

func readStats(path string) (map[key]*stat, []key, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	runs := map[key][]Result{}
	var order []key
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] != '{' {
			continue
		}
		var r Result
		if err := json.Unmarshal([]byte(line), &r); err != nil || r.Test == "" {
			continue // other JSON lines (churn's tally) are raw data, not results
		}
		k := key{r.Test, r.Target}
		if _, ok := runs[k]; !ok {
			order = append(order, k)
		}
		runs[k] = append(runs[k], r)
	}
	if err := sc.Err(); err != nil {
		return nil, nil, err
	}
	stats := map[key]*stat{}
	for k, rs := range runs {
		s := &stat{rounds: len(rs), unit: rs[0].Unit}
		var p50, p99, rps, val []float64
		for _, r := range rs {
			s.n += r.N
			s.errors += r.Errors
			s.matched += r.Matched
			if s.firstErr == "" {
				s.firstErr = r.FirstErr
			}
			p50, p99, rps, val = append(p50, r.P50us), append(p99, r.P99us), append(rps, r.RPS), append(val, r.Value)
		}
		s.p50, s.p99, s.rps, s.value = median(p50), median(p99), median(rps), median(val)
		stats[k] = s
	}
	return stats, order, nil
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

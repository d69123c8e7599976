package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// runRatio prints, for one test, the ratio of two targets' figures within each round
// and the median of those ratios. On a shared machine the rounds move together (a busy
// second slows both sides of it), so a ratio taken within a round is steadier than the
// ratio of two medians; both are reported.
func runRatio(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("ratio", stderr)
	in := fs.String("in", "", "results.jsonl to read (required)")
	test := fs.String("test", "", "test name (required)")
	a := fs.String("a", "sandboxd", "numerator target")
	b := fs.String("b", "bare", "denominator target")
	field := fs.String("field", "rps", "rps, p50, p99 or cpu (answers per CPU-second of server and client, with load -server-pid)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *in == "" || *test == "" {
		return errors.New("-in and -test are required")
	}
	pick := map[string]func(Result) float64{
		"rps": func(r Result) float64 { return r.RPS },
		"p50": func(r Result) float64 { return r.P50us },
		"p99": func(r Result) float64 { return r.P99us },
		"cpu": func(r Result) float64 { return r.PerCPUSecond },
	}[*field]
	if pick == nil {
		return fmt.Errorf("-field %q: want rps, p50, p99 or cpu", *field)
	}
	f, err := os.Open(*in)
	if err != nil {
		return err
	}
	defer f.Close()
	av, bv := map[int]float64{}, map[int]float64{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		var r Result
		if line == "" || line[0] != '{' || json.Unmarshal([]byte(line), &r) != nil || r.Test != *test {
			continue
		}
		switch r.Target {
		case *a:
			av[r.Round] = pick(r)
		case *b:
			bv[r.Round] = pick(r)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	var rounds []int
	for r := range av {
		if _, ok := bv[r]; ok && bv[r] > 0 {
			rounds = append(rounds, r)
		}
	}
	sort.Ints(rounds)
	var ratios, as, bs []float64
	var parts []string
	for _, r := range rounds {
		x := av[r] / bv[r]
		ratios, as, bs = append(ratios, x), append(as, av[r]), append(bs, bv[r])
		parts = append(parts, fmt.Sprintf("%.2f", x))
	}
	if len(ratios) == 0 {
		return fmt.Errorf("no round has both %s and %s in %s", *a, *b, *test)
	}
	fmt.Fprintf(stdout, "%s %s: %s / %s = %.0f / %.0f (medians) = %.2f; within rounds: %s; median %.2f\n",
		*test, *field, *a, *b, median(as), median(bs), median(as)/median(bs), strings.Join(parts, " "), median(ratios))
	return nil
}

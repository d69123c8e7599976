package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// runIdle reads a process's resident set (VmRSS) now, then its CPU time (utime+stime
// of /proc/PID/stat) across -duration, and prints them as result lines: idle-rss (MiB,
// at the start), idle-rss-end (MiB) and idle-cpu (percent of one core).
func runIdle(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("idle", stderr)
	pid := fs.Int("pid", 0, "process to sample (required)")
	dur := fs.Duration("duration", time.Minute, "how long to measure CPU")
	clk := fs.Int("clk-tck", 100, "clock ticks per second (getconf CLK_TCK)")
	target := fs.String("target", "sandboxd", "target name recorded in the results")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *pid <= 0 || *clk <= 0 {
		return errors.New("-pid is required and -clk-tck must be positive")
	}
	proc := fmt.Sprintf("/proc/%d", *pid)
	rss0, err := statusKiB(proc, "VmRSS")
	if err != nil {
		return err
	}
	t0, err := cpuTicks(proc)
	if err != nil {
		return err
	}
	start := time.Now()
	sleep(ctx, *dur)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	t1, err := cpuTicks(proc)
	if err != nil {
		return fmt.Errorf("the process ended during the measurement: %w", err)
	}
	el := time.Since(start).Seconds()
	rss1, err := statusKiB(proc, "VmRSS")
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	out := []Result{
		{Test: "idle-rss", Target: *target, Value: float64(rss0) / 1024, Unit: "MiB", Seconds: 0},
		{Test: "idle-rss-end", Target: *target, Value: float64(rss1) / 1024, Unit: "MiB", Seconds: el},
		{Test: "idle-cpu", Target: *target, Value: float64(t1-t0) / float64(*clk) / el * 100, Unit: "% of a core", Seconds: el},
	}
	for _, r := range out {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}

// statusKiB reads a "Key:   N kB" line of /proc/PID/status.
func statusKiB(proc, key string) (uint64, error) {
	f, err := os.Open(proc + "/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && k == key {
			n, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parse %s %s: %w", proc, key, err)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("%s/status has no %s", proc, key)
}

// cpuTicks is utime+stime (fields 14 and 15) of /proc/PID/stat, counted after the
// command name's closing parenthesis, which may itself hold spaces or parentheses.
func cpuTicks(proc string) (uint64, error) {
	b, err := os.ReadFile(proc + "/stat")
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("%s/stat: no command name", proc)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("%s/stat: %d fields after the name", proc, len(f))
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("%s/stat: %w", proc, err)
	}
	return ut + st, nil
}

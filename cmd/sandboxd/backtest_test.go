package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/backtest"
)

// fillCSV writes a series of a 4 MiB/s fill of a 1 GiB disk from 600 MiB free to the wall,
// sampled every second after 30 s of quiet.
func fillCSV(t *testing.T) string {
	var b strings.Builder
	b.WriteString("time,avail_bytes,size_bytes\n")
	avail := int64(600 << 20)
	for i := 0; i < 200; i++ {
		if i >= 30 {
			avail = max(avail-4<<20, 0)
		}
		fmt.Fprintf(&b, "%d,%d,%d\n", 1764763200+i, avail, 1<<30)
	}
	p := filepath.Join(t.TempDir(), "fill.csv")
	os.WriteFile(p, []byte(b.String()), 0o644)
	return p
}

// sandboxd backtest replays a series through a config's policy: the DiskFillingUp raised
// with its lead time before the wall, the reclaim the policy would start, the summary;
// --json is the same report as JSON. No daemon runs.
func TestBacktestCommand(t *testing.T) {
	series := fillCSV(t)
	cfg := filepath.Join(t.TempDir(), "policy.toml")
	os.WriteFile(cfg, []byte(`site = []
[[filesystem]]
path = "/sandbox"
reclaim_below = "100MiB"
replace_below = "10MiB"
warn_time_to_full = "5m"
`), 0o644)
	r := sandboxd(t, nil, "backtest", "--config", cfg, series)
	if r.code != 0 {
		t.Fatalf("exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{"raised   DiskFillingUp (PredictedFull): /sandbox has ", "lead time 2m",
		"reclaim  would start (trigger pressure, rung ladder): ", "target 356.0 MiB",
		"summary: 200 samples over 3m19s (every 1s); DiskFillingUp raised 1", "full 1 times, 1 warned"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("backtest output lacks %q:\n%s", want, r.stdout)
		}
	}
	r = sandboxd(t, nil, "backtest", "--json", "--config", cfg, series)
	var rep backtest.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || r.code != 0 {
		t.Fatalf("--json: exit %d %v: %s", r.code, err, r.stdout)
	}
	if len(rep.Warnings) != 1 || rep.Warnings[0].TrueFullSeconds == nil || rep.Summary.Walls != 1 || rep.Summary.Reclaims != 1 {
		t.Fatalf("--json report: %+v", rep)
	}
	// The embedded default policy (warn_time_to_full 1h) on stdin.
	f, _ := os.Open(series)
	defer f.Close()
	if r := sandboxdStdin(t, f, "backtest", "-"); r.code != 0 || !strings.Contains(r.stdout, "DiskFillingUp raised 1") {
		t.Fatalf("default policy from stdin: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}

	bad := filepath.Join(t.TempDir(), "bad.csv")
	os.WriteFile(bad, []byte("time,avail_bytes,size_bytes\n10,5,100\n9,5,100\n"), 0o644)
	if r := sandboxd(t, nil, "backtest", bad); r.code != exitUsage || !strings.Contains(r.stderr, "bad.csv: line 3: time") {
		t.Fatalf("a series going back: exit %d: %s", r.code, r.stderr)
	}
	badCfg := filepath.Join(t.TempDir(), "bad.toml")
	os.WriteFile(badCfg, []byte("[[filesystem]]\npath = \"/\"\nreclaim_below = \"lots\"\n"), 0o644)
	if r := sandboxd(t, nil, "backtest", "--config", badCfg, series); r.code != exitConfig || !strings.Contains(r.stderr, "reclaim_below") {
		t.Fatalf("a bad config: exit %d: %s", r.code, r.stderr)
	}
	if r := sandboxd(t, nil, "backtest", "--filesystem", "/nope", series); r.code != exitUsage {
		t.Fatalf("--filesystem of no entry: exit %d: %s", r.code, r.stderr)
	}
	if r := sandboxd(t, nil, "backtest"); r.code != exitUsage {
		t.Fatalf("no series: exit %d: %s", r.code, r.stderr)
	}
}

// sandboxdStdin runs the binary with stdin from in.
func sandboxdStdin(t *testing.T, in *os.File, args ...string) result {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Stdin = in
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run sandboxd %v: %v", args, err)
	}
	return result{code, out.String(), errb.String()}
}

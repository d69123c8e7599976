package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/backtest"
	"github.com/sandboxd/sandboxd/internal/config"
)

// backtestCommand is `sandboxd backtest [--config FILE] [--json] SERIES` (CONTRACT §14):
// the real pressure and reclaim-decision code driven by a recorded series on a simulated
// clock; no daemon, nothing on disk touched.
func backtestCommand() *command {
	return &command{name: "backtest", summary: "replay a recorded disk series through the policy: warnings, lead times, would-be reclaims",
		args: "SERIES", minArgs: 1, maxArgs: 1, globals: gJSON | gConfig,
		long: "SERIES is a file (\"-\" for stdin): CSV with the header time,avail_bytes,size_bytes[,files_free,files]\n" +
			"(time in Unix seconds or RFC 3339), or the JSON of Prometheus' /api/v1/query_range for\n" +
			"node_filesystem_avail_bytes or sandboxd_filesystem_avail_bytes with the size_bytes series beside it.\n" +
			"The policy is --config FILE's (default: the embedded default config), its first [[filesystem]] or\n" +
			"--filesystem PATH's; the series' spacing stands for sample_interval. Prints the conditions raised and\n" +
			"cleared, each DiskFillingUp's lead time before the series was full, the reclaims the policy would\n" +
			"start, and a summary line. Exit 0, 64 on a bad series or flag, 78 on a bad config.\n" +
			"See docs/operations.md, \"Growth and time to full\", for exporting a series from Prometheus.",
		setup: func(fs *flag.FlagSet) runFunc {
			fsPath := fs.String("filesystem", "", "the [[filesystem]] `PATH` of the config whose policy to run (default: the first)")
			size := fs.String("size", "", "the filesystem's `SIZE` when the series has none (a query_range of avail alone)")
			return func(ctx context.Context, inv *invocation) int {
				var sizeBytes uint64
				if *size != "" {
					n, err := api.ParseSize(*size)
					if err != nil || n <= 0 {
						return inv.usageErr("--size %q: give a size such as 16GiB", *size)
					}
					sizeBytes = uint64(n)
				}
				cfg, err := backtestConfig(inv.g.config)
				if err != nil {
					fmt.Fprintf(inv.stderr, "%s: %v\n", inv.name, err)
					return exitConfig
				}
				idx := 0
				if *fsPath != "" {
					idx = -1
					for i, f := range cfg.Filesystems {
						if f.Path == *fsPath {
							idx = i
						}
					}
					if idx < 0 {
						return inv.usageErr("--filesystem %s: the config has no such [[filesystem]]", *fsPath)
					}
				}
				policy, err := backtest.FromConfig(cfg, idx)
				if err != nil {
					fmt.Fprintf(inv.stderr, "%s: %v\n", inv.name, err)
					return exitConfig
				}
				series, err := readSeriesArg(inv.args[0], sizeBytes)
				if err != nil {
					fmt.Fprintf(inv.stderr, "%s: %v\n", inv.name, err)
					return exitUsage
				}
				rep := backtest.Run(policy, series)
				if inv.g.json {
					printJSON(inv.stdout, rep)
					return exitOK
				}
				rep.Print(inv.stdout)
				return exitOK
			}
		}}
}

// backtestConfig loads the policy to try: the file, or the embedded default.
func backtestConfig(path string) (*config.Config, error) {
	if path == "" {
		return config.Parse([]byte(config.Default()), "the embedded default config")
	}
	return config.Load(path)
}

func readSeriesArg(name string, size uint64) (backtest.Series, error) {
	if name == "-" {
		return backtest.ReadSeries(os.Stdin, "stdin", size)
	}
	f, err := os.Open(name)
	if err != nil {
		return backtest.Series{}, err
	}
	defer f.Close()
	return backtest.ReadSeries(f, name, size)
}

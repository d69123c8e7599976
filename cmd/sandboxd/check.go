package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/client"
)

// Nagios plugin exit statuses.
const (
	nagiosOK       = 0
	nagiosWarning  = 1
	nagiosCritical = 2
	nagiosUnknown  = 3
)

// runCheck prints one Nagios line with perfdata and exits 0/1/2/3. An unreachable daemon
// is UNKNOWN (3) — the plugin convention wins over the client's 69 here — and the line
// still carries the client's own measurement of the config's watched filesystems.
func checkCommand() *command {
	return &command{name: "check", summary: "health for monitoring (Nagios plugin convention: exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN)",
		globals: gClient, run: runCheck}
}

func runCheck(ctx context.Context, inv *invocation) int {
	st, err := inv.client().Status(ctx)
	if err != nil {
		// No answer is UNKNOWN (3), whatever the reason; the line still says why and
		// carries the client's own measurement of /.
		reason := err.Error()
		var ue *client.UnreachableError
		var te *client.TimeoutError
		switch {
		case errors.As(err, &ue):
			reason = ue.Error()
		case errors.As(err, &te):
			reason = te.Error()
		}
		disks := measureAll(inv.disks()) // the config's watched filesystems, not the client's /tmp
		var lines []string
		for _, d := range disks {
			lines = append(lines, diskLine(d))
		}
		line := fmt.Sprintf("SANDBOXD UNKNOWN - %s; %s", reason, strings.Join(lines, "; "))
		if inv.g.json {
			printJSON(inv.stdout, withDisks(map[string]any{"status": nagiosUnknown, "state": "UNKNOWN", "line": line, "error": reason}, disks))
		} else {
			fmt.Fprintln(inv.stdout, line)
		}
		return nagiosUnknown
	}
	line, code := checkLine(st)
	if inv.g.json {
		printJSON(inv.stdout, map[string]any{"status": code, "state": nagiosState[code], "line": line})
		return code
	}
	fmt.Fprintln(inv.stdout, line)
	return code
}

var nagiosState = map[int]string{nagiosOK: "OK", nagiosWarning: "WARNING", nagiosCritical: "CRITICAL", nagiosUnknown: "UNKNOWN"}

func checkLine(st *api.Status) (string, int) {
	code, word := nagiosOK, "OK"
	var msgs []string
	for _, c := range st.Conditions {
		if !c.Status {
			continue
		}
		msgs = append(msgs, fmt.Sprintf("%s(%s): %s", c.Type, c.Subject, c.Message))
		if c.Severity == api.HealthCritical {
			code, word = nagiosCritical, "CRITICAL"
		} else if code == nagiosOK {
			code, word = nagiosWarning, "WARNING"
		}
	}
	var summary, perf []string
	for _, f := range st.Filesystems {
		s := fmt.Sprintf("%s %.0f%% used, %s free", f.Path, f.UsedRatio*100, api.FormatSize(f.AvailBytes))
		if v := f.Judge(); v != "" {
			s += " (verdict " + v + ")"
		}
		summary = append(summary, s)
		label := perfLabel(f.Path)
		// avail: warn and crit are the reclaim and replace thresholds (an alert when below).
		perf = append(perf, fmt.Sprintf("'%s avail'=%dB;%d:;%d:;0;%d", label, f.AvailBytes,
			f.ReclaimThresholdBytes, f.ReplaceThresholdBytes, f.SizeBytes))
		if f.Files > 0 {
			perf = append(perf, fmt.Sprintf("'%s inodes_free'=%d;%d:;%d:;0;%d", label, f.FilesFree,
				f.ReclaimThresholdFiles, f.ReplaceThresholdFiles, f.Files))
		}
		perf = append(perf, fmt.Sprintf("'%s growth'=%.0fB", label, f.GrowthBytesPerSecond))
	}
	text := strings.Join(summary, "; ")
	if len(msgs) > 0 {
		text = strings.Join(msgs, "; ") + "; " + text
	}
	return fmt.Sprintf("SANDBOXD %s - %s | %s", word, text, strings.Join(perf, " ")), code
}

// perfLabel keeps a perfdata label free of the quote and '=' that would break it.
func perfLabel(s string) string {
	return strings.NewReplacer("'", "_", "=", "_").Replace(s)
}

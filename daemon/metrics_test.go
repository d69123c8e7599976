package daemon

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// TestMetricsExposition checks the series of CONTRACT §7 exist from start-up and that
// `promtool check metrics` has nothing to say about the exposition.
func TestMetricsExposition(t *testing.T) {
	promtool := testenv.RequireCommand(t, "promtool")
	dir := t.TempDir()
	site := filepath.Join(dir, "site")
	os.Mkdir(site, 0o755)
	td := startDaemon(t, "[[site]]\nname = \"s\"\npath = \""+site+"\"\n[[filesystem]]\npath = \""+dir+"\"\n",
		func(o *Options) { o.Commit = "abc1234" })
	td.do(t, "POST", "/v1/launch", "{}")
	status, ctype, body := td.do(t, "GET", "/metrics", "")
	if status != 200 || !strings.HasPrefix(ctype, "text/plain") {
		t.Fatalf("/metrics: %d %s", status, ctype)
	}
	for _, want := range []string{
		`sandboxd_build_info{goversion="`, `revision="abc1234",version="test"} 1`,
		`sandboxd_reclaim_freed_bytes_total{source="site:s"} 0`, `sandboxd_reclaim_freed_files_total{source="site:s"} 0`, `sandboxd_mode{mode="enforce"} 1`,
		"sandboxd_config_last_reload_successful 1", "sandboxd_config_last_reload_success_timestamp_seconds",
		`sandboxd_filesystem_size_bytes{device="`, "sandboxd_filesystem_avail_bytes", "sandboxd_filesystem_files_free",
		"sandboxd_filesystem_predicted_full_seconds", "sandboxd_filesystem_reclaim_threshold_bytes", "sandboxd_filesystem_stale",
		`sandboxd_condition{subject="` + dir + `",type="DiskPressure"} 0`,
		`sandboxd_site_files{site="s"}`, `sandboxd_site_pruned_files_total{reason="age",site="s"} 0`,
		`sandboxd_launch_requests_total{result="ok"} 1`, `sandboxd_launch_requests_total{result="disk_full"} 0`,
		`sandboxd_launch_duration_seconds_bucket{le="1e-05"}`,
		`sandboxd_reclaim_runs_total{trigger="pressure",verdict="replace"} 0`,
		`sandboxd_reclaim_actions_total{kind="delete",status="done"} 0`,
		"go_goroutines", "process_resident_memory_bytes",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("exposition lacks %q", want)
		}
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	out, err := cmd.CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}

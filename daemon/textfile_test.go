package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// textfileConfig watches fsDir (no reserve, thresholds that never fire on a small
// tmpfs), has one site in siteDir and writes the textfile every 100ms.
func textfileConfig(fsDir, siteDir, textfile string) string {
	return fmt.Sprintf(`[[filesystem]]
path = %q
reclaim_below = "1KiB"
replace_below = "0"
reclaim_below_inodes = "0"
replace_below_inodes = "0"
reserve = "0"
[[site]]
name = "s"
path = %q
[metrics]
textfile = %q
textfile_interval = "100ms"
`, fsDir, siteDir, textfile)
}

// sampled reports whether the textfile has the filesystem gauges yet: they appear with
// the first sample, and the first write may come before it.
func sampled(path string) func(os.FileInfo) bool {
	return func(os.FileInfo) bool {
		b, _ := os.ReadFile(path)
		return bytes.Contains(b, []byte("sandboxd_filesystem_avail_bytes{"))
	}
}

func waitFile(t *testing.T, path string, what string, ok func(os.FileInfo) bool) os.FileInfo {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if fi, err := os.Stat(path); err == nil && ok(fi) {
			return fi
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s: %s did not happen within a minute", path, what)
	return nil
}

// parseExposition decodes text exposition strictly (as node_exporter's textfile
// collector does) into families by name.
func parseExposition(t *testing.T, b []byte) map[string]*dto.MetricFamily {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("exposition does not parse: %v\n%s", err, b)
	}
	return mfs
}

func labelsOf(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, lp := range m.GetLabel() {
		out[lp.GetName()] = lp.GetValue()
	}
	return out
}

// TestTextfile: the textfile holds sandboxd's own series only (no go_* or process_*),
// passes promtool, is rewritten every interval, goes on being rewritten whole on a full
// disk (issue 25: it used to freeze there; nothing left but the file and its spare), and
// goes away, spare and all, when a reload turns it off.
func TestTextfile(t *testing.T) {
	promtool := testenv.RequireCommand(t, "promtool")
	dir := testenv.Tmpfs(t, 1<<20, 0) // the textfile's directory, small enough to fill
	watched := testenv.Tmpfs(t, 8<<20, 0)
	site := filepath.Join(watched, "site")
	os.Mkdir(site, 0o755)
	textfile := filepath.Join(dir, "sandboxd.prom")
	td := startDaemon(t, textfileConfig(watched, site, textfile), func(o *Options) { o.Commit = "abc1234" })

	fi := waitFile(t, textfile, "a write after the first sample", sampled(textfile))
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("textfile mode %v; node_exporter runs as its own user and needs 0644", fi.Mode())
	}
	b, _ := os.ReadFile(textfile)
	mfs := parseExposition(t, b)
	for name := range mfs {
		if !strings.HasPrefix(name, "sandboxd_") {
			t.Errorf("textfile has %s: node_exporter has the Go and process families already", name)
		}
	}
	bi := mfs["sandboxd_build_info"]
	if bi == nil || labelsOf(bi.Metric[0])["revision"] != "abc1234" || labelsOf(bi.Metric[0])["version"] != "test" {
		t.Errorf("sandboxd_build_info = %v; want version test, revision abc1234", bi)
	}
	avail := mfs["sandboxd_filesystem_avail_bytes"]
	if avail == nil || len(avail.Metric) != 1 {
		t.Fatalf("sandboxd_filesystem_avail_bytes = %v", avail)
	}
	if l := labelsOf(avail.Metric[0]); l["device"] != "tmpfs" || l["mountpoint"] != watched || l["fstype"] != "tmpfs" {
		t.Errorf("filesystem labels %v; want device tmpfs (the mount source, as node_exporter has it), mountpoint %s", l, watched)
	}
	freed := map[string]bool{}
	for _, m := range mfs["sandboxd_reclaim_freed_bytes_total"].GetMetric() {
		if m.GetCounter().GetValue() == 0 {
			freed[labelsOf(m)["source"]] = true
		}
	}
	if !freed["site:s"] {
		t.Errorf("sandboxd_reclaim_freed_bytes_total{source=\"site:s\"} is not there at zero from start-up: %v", freed)
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(b)
	if out, err := cmd.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("promtool check metrics on the textfile: %v\n%s", err, out)
	}
	waitFile(t, textfile, "a rewrite", func(f os.FileInfo) bool { return f.ModTime().After(fi.ModTime()) })

	// Fill the directory's filesystem to the last block.
	filler := filepath.Join(dir, "filler")
	if err := testenv.Fill(filler, 1<<20); err != nil && !errors.Is(err, syscall.ENOSPC) {
		t.Fatal(err)
	}
	if f, err := os.OpenFile(filler, os.O_WRONLY|os.O_APPEND, 0); err == nil {
		for {
			if _, err := f.Write(make([]byte, 4096)); err != nil {
				break
			}
		}
		f.Close()
	}
	// On the full disk the figures stay current (issue 25): the file keeps being
	// rewritten, whole, in the blocks it already has.
	full, _ := os.Stat(textfile)
	for i := 0; i < 3; i++ {
		prev := full
		full = waitFile(t, textfile, "a rewrite on the full disk", func(f os.FileInfo) bool { return f.ModTime().After(prev.ModTime()) })
		b, _ = os.ReadFile(textfile)
		if _, ok := parseExposition(t, b)["sandboxd_build_info"]; !ok {
			t.Fatalf("the textfile written on a full disk is not a complete exposition:\n%s", b)
		}
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.Name() != "sandboxd.prom" && e.Name() != ".sandboxd.prom.spare" && e.Name() != "filler" {
			t.Errorf("left behind in the textfile directory: %s", e.Name())
		}
	}
	if err := td.do2("GET", "/livez"); err != nil {
		t.Errorf("a full textfile directory made the daemon unhealthy: %v", err)
	}
	os.Remove(filler)

	// A reload that turns the textfile off removes it: a file nobody rewrites would
	// report frozen values for ever.
	cfgPath := filepath.Join(td.dir, "sandboxd.toml")
	text, _ := os.ReadFile(cfgPath)
	os.WriteFile(cfgPath, bytes.Replace(text, []byte(fmt.Sprintf("textfile = %q", textfile)), []byte(`textfile = ""`), 1), 0o644)
	if err := td.d.Reload(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for _, err := os.Stat(textfile); err == nil; _, err = os.Stat(textfile) {
		if time.Now().After(deadline) {
			t.Fatal("the textfile stayed after a reload turned it off")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := os.Stat(filepath.Join(dir, ".sandboxd.prom.spare")); err == nil {
		t.Error("the textfile's spare stayed after a reload turned it off")
	}
}

// do2 is a GET that fails unless the answer is 200.
func (td *testDaemon) do2(method, path string) error {
	req, _ := http.NewRequest(method, "http://sandboxd"+path, nil)
	resp, err := td.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	return nil
}

// TestTextfileScrapedByNodeExporter runs Debian's real prometheus-node-exporter on the
// textfile directory: the scrape has no textfile error and no gathering error, the
// sandboxd series arrive, and sandboxd's filesystem series join node_exporter's on
// {device, mountpoint, fstype}. A control file repeating the Go families (what the
// old curl recipe wrote) shows the check can fail.
func TestTextfileScrapedByNodeExporter(t *testing.T) {
	ne := testenv.RequireCommand(t, "prometheus-node-exporter")
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	watched := testenv.Tmpfs(t, 8<<20, 0)
	site := filepath.Join(watched, "site")
	os.Mkdir(site, 0o755)
	textfile := filepath.Join(dir, "sandboxd.prom")
	td := startDaemon(t, textfileConfig(watched, site, textfile))
	waitFile(t, textfile, "a write after the first sample", sampled(textfile))

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	var log testenv.SyncBuffer
	cmd := exec.Command(ne, "--web.listen-address="+addr, "--collector.disable-defaults",
		"--collector.textfile", "--collector.textfile.directory="+dir, "--collector.filesystem")
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	scrape := func() map[string]*dto.MetricFamily {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			resp, err := http.Get("http://" + addr + "/metrics")
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 200 {
					return parseExposition(t, b)
				}
				err = fmt.Errorf("status %d: %s", resp.StatusCode, b)
			}
			if time.Now().After(deadline) {
				t.Fatalf("scrape node_exporter: %v\n%s", err, log.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	gauge := func(mfs map[string]*dto.MetricFamily, name string) float64 {
		t.Helper()
		mf := mfs[name]
		if mf == nil || len(mf.Metric) != 1 {
			t.Fatalf("node_exporter has no single %s: %v", name, mf)
		}
		return mf.Metric[0].GetGauge().GetValue()
	}
	mfs := scrape()
	if v := gauge(mfs, "node_textfile_scrape_error"); v != 0 {
		t.Errorf("node_textfile_scrape_error = %v\n%s", v, log.String())
	}
	// Whether that scrape logged a gathering error is read at the end: node_exporter's
	// stderr reaches log through a pipe and a copying goroutine, after the answer.
	if mfs["sandboxd_build_info"] == nil || mfs["sandboxd_filesystem_avail_bytes"] == nil {
		t.Fatal("node_exporter does not serve the sandboxd series")
	}
	mtime := mfs["node_textfile_mtime_seconds"]
	if mtime == nil || labelsOf(mtime.Metric[0])["file"] == "" {
		t.Errorf("node_textfile_mtime_seconds = %v; the stale-textfile alert reads it", mtime)
	}
	// The join: the node_exporter series of the same filesystem has the same labels.
	ours := labelsOf(mfs["sandboxd_filesystem_avail_bytes"].Metric[0])
	joined := false
	for _, m := range mfs["node_filesystem_avail_bytes"].GetMetric() {
		l := labelsOf(m)
		if l["mountpoint"] == watched {
			joined = l["device"] == ours["device"] && l["fstype"] == ours["fstype"]
			if !joined {
				t.Errorf("node_exporter has %v, sandboxd %v: the series do not join on device", l, ours)
			}
		}
	}
	if !joined {
		t.Errorf("no node_filesystem_avail_bytes joins sandboxd's %v", ours)
	}

	// Control: /metrics (with the Go and process collectors) as a textfile is what
	// node_exporter rejects; the checks above would see it.
	status, _, body := td.do(t, "GET", "/metrics", "")
	if status != 200 {
		t.Fatalf("/metrics: %d", status)
	}
	os.WriteFile(filepath.Join(dir, "curl-recipe.prom"), []byte(body), 0o644)
	scrape()
	// The control's error names a go_* family. The log is one stream, in order: once the
	// control's error is in, so is anything the first scrape logged, and that must be
	// nothing. If node_exporter took the duplicates silently, the wait fails.
	control := regexp.MustCompile(`error gathering metrics.*go_[a-z_]+`)
	testenv.Eventually(t, time.Minute, "node_exporter to log the control file's duplicate go_* families", func() bool {
		return control.MatchString(log.String())
	})
	if n := strings.Count(log.String(), "error gathering metrics"); n != 1 {
		t.Errorf("node_exporter logged %d gathering errors, want only the control's: the first scrape had one:\n%s", n, log.String())
	}
}

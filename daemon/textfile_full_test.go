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
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// nodeExporter runs Debian's prometheus-node-exporter with only the textfile collector on
// dir and returns a scrape function (strictly parsed families).
func nodeExporter(t *testing.T, dir string) func() map[string]*dto.MetricFamily {
	t.Helper()
	ne := testenv.RequireCommand(t, "prometheus-node-exporter")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	var log testenv.SyncBuffer
	cmd := exec.Command(ne, "--web.listen-address="+addr, "--collector.disable-defaults",
		"--collector.textfile", "--collector.textfile.directory="+dir)
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return func() map[string]*dto.MetricFamily {
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
}

// scraped is the value of the one series of name whose label key is val, and whether
// node_exporter has it.
func scraped(mfs map[string]*dto.MetricFamily, name, key, val string) (float64, bool) {
	for _, m := range mfs[name].GetMetric() {
		if labelsOf(m)[key] == val {
			if m.GetGauge() != nil {
				return m.GetGauge().GetValue(), true
			}
			return m.GetUntyped().GetValue(), true
		}
	}
	return 0, false
}

// TestTextfileCurrentOnAFullDisk is issue 25's case on Debian's layout: the textfile's
// directory lives on the very filesystem sandboxd watches (`/` holds /var/lib/prometheus),
// here a small tmpfs. Filled to its last block, node_exporter goes on serving current
// figures: sandboxd's avail of that filesystem reaches 0 and the file's mtime keeps
// advancing, with nothing logged. A textfile path that must be created on the full disk
// fails, logged once for the whole episode, and once more when it is written again.
func TestTextfileCurrentOnAFullDisk(t *testing.T) {
	T := testenv.Tmpfs(t, 4<<20, 0)
	dir := filepath.Join(T, "node-exporter")
	site := filepath.Join(T, "site")
	os.Mkdir(dir, 0o755)
	os.Mkdir(site, 0o755)
	textfile := filepath.Join(dir, "sandboxd.prom")
	var logs testenv.SyncBuffer
	td := startDaemon(t, textfileConfig(T, site, textfile), func(o *Options) { o.Logger = slogTo(&logs) })
	scrape := nodeExporter(t, dir)
	testenv.Eventually(t, time.Minute, "both textfiles, the first sample in them", func() bool {
		_, err := os.Stat(filepath.Join(dir, ".sandboxd.prom.spare"))
		b, _ := os.ReadFile(textfile)
		return err == nil && bytes.Contains(b, []byte("sandboxd_filesystem_avail_bytes{"))
	})

	filler := filepath.Join(T, "filler")
	if err := testenv.Fill(filler, 4<<20); err != nil && !errors.Is(err, syscall.ENOSPC) {
		t.Fatal(err)
	}
	var st syscall.Statfs_t
	if syscall.Statfs(T, &st); st.Bavail != 0 {
		t.Fatalf("the tmpfs is not full: %d blocks available", st.Bavail)
	}
	var mtime float64
	testenv.Eventually(t, time.Minute, "node_exporter to serve sandboxd's avail of the full disk, 0", func() bool {
		mfs := scrape()
		avail, ok := scraped(mfs, "sandboxd_filesystem_avail_bytes", "mountpoint", T)
		mtime, _ = scraped(mfs, "node_textfile_mtime_seconds", "file", textfile)
		return ok && avail == 0
	})
	for i := 0; i < 3; i++ {
		prev := mtime
		testenv.Eventually(t, time.Minute, "node_exporter to see the textfile rewritten on the full disk", func() bool {
			mfs := scrape()
			mtime, _ = scraped(mfs, "node_textfile_mtime_seconds", "file", textfile)
			errv, _ := scraped(mfs, "node_textfile_scrape_error", "", "")
			return mtime > prev && errv == 0
		})
	}
	if strings.Contains(logs.String(), "metrics textfile") {
		t.Errorf("writing the textfile on a full disk logged:\n%s", logs.String())
	}

	// A new path on another full disk (this one gets the old path's blocks back when a
	// reload moves the file): its files cannot be made. One line for the episode.
	T2 := testenv.Tmpfs(t, 1<<20, 0)
	filler2 := filepath.Join(T2, "filler")
	if err := testenv.Fill(filler2, 1<<20); err != nil && !errors.Is(err, syscall.ENOSPC) {
		t.Fatal(err)
	}
	moved := filepath.Join(T2, "moved.prom")
	cfgPath := filepath.Join(td.dir, "sandboxd.toml")
	text, _ := os.ReadFile(cfgPath)
	os.WriteFile(cfgPath, bytes.Replace(text, []byte(fmt.Sprintf("textfile = %q", textfile)), []byte(fmt.Sprintf("textfile = %q", moved)), 1), 0o644)
	if err := td.d.Reload(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "the failure to be logged", func() bool {
		return strings.Contains(logs.String(), "metrics textfile not written")
	})
	time.Sleep(10 * 100 * time.Millisecond) // ten more rounds of the same failure
	if n := strings.Count(logs.String(), "metrics textfile not written"); n != 1 {
		t.Errorf("%d log lines for one episode of failed writes, want 1:\n%s", n, logs.String())
	}
	os.Remove(filler2)
	testenv.Eventually(t, time.Minute, "the textfile written again once there is room", func() bool {
		_, err := os.Stat(moved)
		return err == nil && strings.Count(logs.String(), "metrics textfile written again") == 1
	})
}

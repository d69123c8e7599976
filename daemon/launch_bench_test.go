package daemon

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// BenchmarkLaunchHandler is BenchmarkLaunchSocket without the socket and net/http's
// connection: the daemon's own work for one launch on a site of 16,381 fresh entries
// (decode, prune, the fresh measurement, the answer's encoding), which is what a launch
// costs beyond a /livez (issue 27). The caller is root, as over the socket.
func BenchmarkLaunchHandler(b *testing.B) {
	dir := b.TempDir()
	site := filepath.Join(dir, "site")
	os.Mkdir(site, 0o755)
	for i := range 16381 {
		os.WriteFile(filepath.Join(site, fmt.Sprintf("job%d.out", i)), nil, 0o644)
	}
	td := startDaemon(b, "[[site]]\nname = \"s\"\npath = \""+site+"\"\n[[filesystem]]\npath = \""+dir+"\"\n")
	h := td.d.Handler()
	ctx := context.WithValue(context.Background(), peerKey{}, Peer{Known: true})
	b.ReportAllocs()
	cpu0 := processCPU()
	for b.Loop() {
		req := httptest.NewRequestWithContext(ctx, "POST", "/v1/launch", strings.NewReader(`{"site":"s"}`))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"files":16381`) {
			b.Fatal(rec.Code, rec.Body.String())
		}
	}
	// CPU time (user + system, the whole process) per call: on a machine shared with
	// other work, wall time per call moves by 2x between runs, the CPU a call costs less.
	b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
}

// processCPU is the user + system CPU time the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

package jobs

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// BenchmarkRegistryBytes measures what the registry writes (issue 20 item 2): bytes per
// registration and per heartbeat appended to the journal, side by side with what the
// whole-document rewrite of earlier versions wrote for the same calls (the registry's
// JSON document, rewritten on every registration and, coalesced, once per second of
// heartbeats; measured here as the document's size at each call). 100 jobs of real
// processes in real cgroups, then 1,000 heartbeats.
//
//	CI=true go test -run '^$' -bench RegistryBytes -benchtime=1x ./jobs/
func BenchmarkRegistryBytes(b *testing.B) {
	const jobs, beats = 100, 1000
	for range b.N {
		f := newFixture(b, func(o *Options) { o.RegistryDir = b.TempDir(); o.DefaultTTL = time.Hour })
		var regBytes, docBytes int64
		for i := range jobs {
			p := spawn(b, `exec sleep 600`)
			f.m.mu.Lock()
			w0 := f.m.journal.written
			f.m.mu.Unlock()
			if _, err := f.m.Register(api.JobRequest{ID: fmt.Sprintf("bench-%03d", i), PID: p.Process.Pid,
				Site: "aura-bg", Labels: map[string]string{"turn": "17"}}, Caller{}); err != nil {
				b.Fatal(err)
			}
			f.m.mu.Lock()
			regBytes += f.m.journal.written - w0
			docBytes += docSize(f.m)
			f.m.mu.Unlock()
		}
		f.m.mu.Lock()
		w0 := f.m.journal.written
		f.m.mu.Unlock()
		for i := range beats {
			if _, err := f.m.Heartbeat(fmt.Sprintf("bench-%03d", i%jobs), 0); err != nil {
				b.Fatal(err)
			}
		}
		f.m.mu.Lock()
		hbBytes := f.m.journal.written - w0
		full := docSize(f.m)
		f.m.mu.Unlock()
		b.ReportMetric(float64(regBytes)/jobs, "B/registration")
		b.ReportMetric(float64(hbBytes)/beats, "B/heartbeat")
		b.ReportMetric(float64(docBytes)/jobs, "old-B/registration")
		b.ReportMetric(float64(full), "old-B/rewrite-at-100-jobs")
		f.shutdown()
	}
}

// docSize is the size of the whole registry as the state document of earlier versions.
func docSize(m *Manager) int64 {
	doc := stateDoc{BootID: m.boot}
	for _, j := range m.jobs {
		c := *j
		doc.Jobs = append(doc.Jobs, &c)
	}
	out, _ := json.MarshalIndent(doc, "", "  ")
	return int64(len(out))
}

// BenchmarkSessionLease is the figure of issue 20 item 4: 1,000 live jobs (real processes
// in real cgroups) under one session lease cost one heartbeat per renewal, whatever their
// number, against 1,000 per-job heartbeats for the same jobs on leases of their own.
// Reported: calls, registry bytes and time per renewal of all 1,000 jobs.
//
//	CI=true go test -run '^$' -bench SessionLease -benchtime=1x ./jobs/
func BenchmarkSessionLease(b *testing.B) {
	const jobs, rounds = 1000, 20
	for range b.N {
		f := newFixture(b, func(o *Options) { o.RegistryDir = b.TempDir(); o.DefaultTTL = time.Hour; o.Logger = nil })
		for i := range jobs {
			p := spawn(b, `exec sleep 600`)
			lease := "session-1"
			if i%2 == 1 {
				lease = "" // the other half on leases of their own, for the comparison
			}
			if _, err := f.m.Register(api.JobRequest{ID: fmt.Sprintf("j%04d", i), PID: p.Process.Pid, Lease: lease}, Caller{}); err != nil {
				b.Fatal(err)
			}
		}
		written := func() int64 { f.m.mu.Lock(); defer f.m.mu.Unlock(); return f.m.journal.written }
		w0, t0 := written(), time.Now()
		for range rounds {
			if _, err := f.m.HeartbeatLease("session-1", 0, Caller{}); err != nil {
				b.Fatal(err)
			}
		}
		leaseNs, leaseB := float64(time.Since(t0).Nanoseconds())/rounds, float64(written()-w0)/rounds
		w0, t0 = written(), time.Now()
		for range rounds {
			for i := 1; i < jobs; i += 2 {
				if _, err := f.m.Heartbeat(fmt.Sprintf("j%04d", i), 0); err != nil {
					b.Fatal(err)
				}
			}
		}
		// Scaled from the 500 jobs on their own leases to 1,000.
		perJobNs, perJobB := 2*float64(time.Since(t0).Nanoseconds())/rounds, 2*float64(written()-w0)/rounds
		b.ReportMetric(1, "calls/renewal-shared")
		b.ReportMetric(jobs, "calls/renewal-per-job")
		b.ReportMetric(leaseB, "B/renewal-shared")
		b.ReportMetric(perJobB, "B/renewal-per-job")
		b.ReportMetric(leaseNs/1e3, "µs/renewal-shared")
		b.ReportMetric(perJobNs/1e3, "µs/renewal-per-job-in-process")
		f.shutdown()
	}
}

package jobs

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// TestCountsHoldThroughMixedTransitions: the kept counts and indexes (each uid's live
// jobs for max_per_uid, the ended jobs for keep_ended_max, the jobs of each shared
// lease) equal a recount by walking the registry after every step of a random sequence
// of real transitions: registrations by root and by uid 65534 (their own processes, real
// cgroups), ids reused by the same and by the other uid, a shared lease joined and left,
// DELETE, a process exiting by itself (noticed from cgroup.events), a lease lapsing (a
// heartbeat that shortens it: for a shared lease every job of it ends), heartbeats, and
// restarts of the Manager on the same registry, clean (the journal rewritten at stop) or
// as after a crash (the journal as it was before the stop, appended to since its last
// rewrite). A registration of 65534's is refused by max_per_uid exactly when the
// recount says it holds the limit already. The seed is logged: SANDBOXD_SEED=N replays.
func TestCountsHoldThroughMixedTransitions(t *testing.T) {
	const maxPerUID, maxEnded = 2, 4
	f := newFixture(t, func(o *Options) {
		o.MaxPerUID, o.MaxEnded, o.KeepEnded, o.DefaultTTL = maxPerUID, maxEnded, time.Hour, time.Hour
	})
	seed := time.Now().UnixNano()
	if s, err := strconv.ParseInt(os.Getenv("SANDBOXD_SEED"), 10, 64); err == nil {
		seed = s
	}
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	// Steps until every kind of outcome below was seen a few times (a few hundred).
	seen := map[string]int{}
	covered := func() bool {
		for _, k := range []string{"registered", "dropped", "exited before placed", "refused by max_per_uid", "409", "deleted", "exited", "lapsed", "lapsed shared", "heartbeat", "restart", "crash"} {
			if seen[k] < 3 {
				return false
			}
		}
		return true
	}

	start := func(uid uint32) int {
		t.Helper()
		if uid == 0 {
			return spawn(t, `exec sleep 600`).Process.Pid
		}
		p := exec.Command("sleep", "600")
		p.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		waited := make(chan struct{})
		go func() { p.Wait(); close(waited) }()
		t.Cleanup(func() { p.Process.Kill(); <-waited })
		return p.Process.Pid
	}
	caller := func(uid uint32) Caller { return Caller{UID: uid} }
	// running lists the listed running jobs (not placing), by key.
	running := func() []*job {
		f.m.mu.Lock()
		defer f.m.mu.Unlock()
		var out []*job
		for _, j := range f.m.jobs {
			if j.State == api.JobRunning && !j.placing {
				out = append(out, j)
			}
		}
		slices.SortFunc(out, func(a, b *job) int {
			if a.ID < b.ID {
				return -1
			}
			return 1
		})
		return out
	}
	recountLive := func(uid uint32) int {
		f.m.mu.Lock()
		defer f.m.mu.Unlock()
		n := 0
		for _, j := range f.m.jobs {
			if j.live() && j.Owner != nil && j.Owner.UID == uid {
				n++
			}
		}
		return n
	}
	stateOf := func(j *job) string {
		f.m.mu.Lock()
		defer f.m.mu.Unlock()
		return j.State
	}
	check := func(step string) { t.Helper(); checkCounts(t, f.m, maxEnded, step) }
	// leasesSettle waits until every shared lease has a listed job: at once after an
	// end, by the next tick after a registration replaced a lease's last ended job.
	leasesSettle := func(step string) {
		t.Helper()
		waitFor(t, time.Minute, step+": leases without listed jobs forgotten", func() bool {
			f.m.mu.Lock()
			defer f.m.mu.Unlock()
			for name := range f.m.leases {
				if len(f.m.leaseJobs[name]) == 0 {
					return false
				}
			}
			return true
		})
	}
	// ended waits until none of js is running any more.
	ended := func(what string, js ...*job) {
		t.Helper()
		waitFor(t, time.Minute, what, func() bool {
			for _, j := range js {
				if s := stateOf(j); s == api.JobRunning || s == api.JobEnding {
					return false
				}
			}
			return true
		})
	}
	restart := func(crash bool) {
		t.Helper()
		journal := filepath.Join(f.opts.RegistryDir, journalName)
		var saved []byte
		if crash {
			// The journal as a kill -9 would leave it: written up to the last call, not
			// rewritten at the stop. Nothing runs between the copy and the stop but the
			// ticks, which change nothing here (no lease is due).
			f.m.mu.Lock()
			b, err := os.ReadFile(journal)
			f.m.mu.Unlock()
			if err != nil {
				t.Fatal(err)
			}
			saved = b
		}
		f.shutdown()
		if crash {
			if err := os.WriteFile(journal, saved, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		f.start()
	}

	ids := []string{"a", "b", "c", "d", "e", "f"}
	for i := 0; !covered(); i++ {
		if i == 5000 {
			t.Fatalf("not every transition seen in %d steps: %v", i, seen)
		}
		var step string
		switch op := rng.Intn(10); {
		case op < 4: // register
			uid := []uint32{0, 65534}[rng.Intn(2)]
			id := ids[rng.Intn(len(ids))]
			lease := []string{"", "", "s"}[rng.Intn(3)]
			step = fmt.Sprintf("step %d: register %s by uid %d, lease %q", i, id, uid, lease)
			key := jobKey(uid, id)
			f.m.mu.Lock()
			old := f.m.jobs[key]
			held := old != nil && (old.live() || old.State == api.JobLeaked)
			f.m.mu.Unlock()
			full := uid != 0 && recountLive(uid) >= maxPerUID
			pid, zombie := 0, rng.Intn(4) == 0
			if zombie {
				// A process that exited before it was moved: a zombie until reaped below,
				// so its pid is no one else's meanwhile.
				step += ", its process exited"
				p := exec.Command("sh", "-c", "exit 0")
				p.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
				if err := p.Start(); err != nil {
					t.Fatal(err)
				}
				defer p.Wait()
				pid = p.Process.Pid
				waitFor(t, time.Minute, "the process to exit", func() bool { return !alive(pid) })
			} else {
				pid = start(uid)
			}
			_, err := f.m.Register(api.JobRequest{ID: id, PID: pid, Lease: lease}, caller(uid))
			switch {
			case held:
				if problemCode(err) != api.CodeConflict {
					t.Fatalf("%s: %v, want 409: its id is held", step, err)
				}
				seen["409"]++
			case full:
				if problemCode(err) != api.CodeJobsUnavailable {
					t.Fatalf("%s: %v, want refused by max_per_uid = %d", step, err, maxPerUID)
				}
				seen["refused by max_per_uid"]++
			case err != nil:
				t.Fatalf("%s: %v", step, err)
			case zombie:
				// Registered or refused, it must not stay running: its cgroup is empty and
				// will never change, so no event of it will come.
				f.m.mu.Lock()
				j := f.m.jobs[key]
				f.m.mu.Unlock()
				if j != nil {
					ended(step+": the job of a process that had exited ends", j)
				}
				seen["exited before placed"]++
			default:
				seen["registered"]++
			}
		case op < 5: // a registration the placing fails: dropped
			uid := []uint32{0, 65534}[rng.Intn(2)]
			step = fmt.Sprintf("step %d: register stray by uid %d onto a cgroup a process holds", i, uid)
			dir := filepath.Join(f.root, "jobs", jobKey(uid, "stray"))
			squat := spawn(t, `exec sleep 600`)
			// The Manager's start removes empty cgroups it does not know: made again until
			// the process is in it.
			waitFor(t, time.Minute, "a process in "+dir, func() bool {
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				return writeFile(filepath.Join(dir, "cgroup.procs"), strconv.Itoa(squat.Process.Pid)) == nil
			})
			full := uid != 0 && recountLive(uid) >= maxPerUID
			_, err := f.m.Register(api.JobRequest{ID: "stray", PID: start(uid)}, caller(uid))
			want := api.CodeConflict
			if full {
				want = api.CodeJobsUnavailable
			}
			if problemCode(err) != want {
				t.Fatalf("%s: %v, want %s", step, err, want)
			}
			destroyTree(t, dir)
			if !full {
				seen["dropped"]++
			}
		case op < 6: // DELETE
			js := running()
			if len(js) == 0 {
				continue
			}
			j := js[rng.Intn(len(js))]
			step = fmt.Sprintf("step %d: DELETE %s", i, j.ID)
			uid := j.Owner.UID
			if v, err := f.m.EndAs(context.Background(), pubID(j.ID), api.ReasonDeleted, true, caller(uid)); err != nil || v.State != api.JobKilled && v.State != api.JobEnded {
				t.Fatalf("%s: %+v %v", step, v, err)
			}
			seen["deleted"]++
		case op < 7: // its process exits by itself
			js := running()
			if len(js) == 0 {
				continue
			}
			j := js[rng.Intn(len(js))]
			step = fmt.Sprintf("step %d: process of %s exits", i, j.ID)
			syscall.Kill(j.PID, syscall.SIGKILL)
			ended(step, j)
			if s := stateOf(j); s != api.JobEnded {
				t.Fatalf("%s: state %s, want ended", step, s)
			}
			seen["exited"]++
		case op < 8: // a heartbeat that shortens the lease: it lapses
			js := running()
			if len(js) == 0 {
				continue
			}
			j := js[rng.Intn(len(js))]
			step = fmt.Sprintf("step %d: lease of %s (shared: %q) lapses", i, j.ID, j.Lease)
			f.m.mu.Lock()
			var all []*job
			for o := range f.m.leaseJobs[j.Lease] {
				if o.State == api.JobRunning && !o.placing {
					all = append(all, o)
				}
			}
			f.m.mu.Unlock()
			if j.Lease == "" {
				all = []*job{j}
			}
			if _, err := f.m.HeartbeatAs(pubID(j.ID), time.Millisecond, caller(j.Owner.UID)); err != nil {
				t.Fatalf("%s: %v", step, err)
			}
			waitFor(t, time.Minute, step, func() bool {
				f.m.mu.Lock()
				regranted := j.State == api.JobRunning && j.LeaseBoot > boottime()+int64(time.Second)
				f.m.mu.Unlock()
				if regranted {
					// A loop woken late on a loaded machine grants a stall grace (stall.go),
					// a ttl from then: the lease is shortened again.
					f.m.HeartbeatAs(pubID(j.ID), time.Millisecond, caller(j.Owner.UID))
				}
				for _, o := range all {
					if s := stateOf(o); s == api.JobRunning || s == api.JobEnding {
						return false
					}
				}
				return true
			})
			for _, o := range all {
				f.m.mu.Lock()
				reason := o.Reason
				f.m.mu.Unlock()
				if reason != api.ReasonLeaseExpired {
					t.Fatalf("%s: job %s ended by %s, want %s", step, o.ID, reason, api.ReasonLeaseExpired)
				}
			}
			if j.Lease != "" {
				seen["lapsed shared"]++
			} else {
				seen["lapsed"]++
			}
		case op < 9: // a heartbeat that extends
			js := running()
			if len(js) == 0 {
				continue
			}
			j := js[rng.Intn(len(js))]
			step = fmt.Sprintf("step %d: heartbeat of %s", i, j.ID)
			if _, err := f.m.HeartbeatAs(pubID(j.ID), 2*time.Hour, caller(j.Owner.UID)); err != nil {
				t.Fatalf("%s: %v", step, err)
			}
			seen["heartbeat"]++
		default:
			crash := rng.Intn(2) == 0
			step = fmt.Sprintf("step %d: restart (crash %v)", i, crash)
			restart(crash)
			seen["restart"]++
			if crash {
				seen["crash"]++
			}
		}
		t.Log(step)
		check(step)
		leasesSettle(step)
		check(step + " (leases settled)")
	}
	t.Logf("transitions: %v", seen)
}

// checkCounts compares the counts and indexes m keeps with a recount by walking its jobs.
func checkCounts(t *testing.T, m *Manager, maxEnded int, step string) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	live := map[uint32]int{}
	ended, withLease := map[*job]bool{}, 0
	for key, j := range m.jobs {
		if j.ID != key {
			t.Fatalf("%s: job %s listed under %s", step, j.ID, key)
		}
		if j.live() && j.Owner != nil {
			live[j.Owner.UID]++
		}
		if isEnded(j) {
			ended[j] = true
		}
		if j.Lease == "" {
			continue
		}
		withLease++
		if _, ok := m.leaseJobs[j.Lease][j]; !ok {
			t.Fatalf("%s: job %s of lease %s not among the lease's jobs", step, j.ID, j.Lease)
		}
		l := m.leases[j.Lease]
		if l == nil {
			t.Fatalf("%s: job %s listed with lease %s, which does not exist", step, j.ID, j.Lease)
		}
		if j.State == api.JobRunning && !j.placing && j.LeaseBoot != min(l.LeaseBoot, j.DeadlineBoot) {
			t.Fatalf("%s: running job %s of lease %s has its lease until %d, the lease %d", step, j.ID, j.Lease, j.LeaseBoot, l.LeaseBoot)
		}
	}
	if fmt.Sprint(live) != fmt.Sprint(m.liveOf) && !(len(live) == 0 && len(m.liveOf) == 0) {
		t.Fatalf("%s: live jobs per uid kept %v, recounted %v", step, m.liveOf, live)
	}
	if m.endedN != len(ended) {
		t.Fatalf("%s: ended jobs kept %d, recounted %d", step, m.endedN, len(ended))
	}
	if len(ended) > maxEnded {
		t.Fatalf("%s: %d ended jobs listed, keep_ended_max = %d", step, len(ended), maxEnded)
	}
	var last int64
	for _, j := range m.ended[m.endedHead:] {
		if j.EndedBoot < last {
			t.Fatalf("%s: index of ended jobs out of order at %s", step, j.ID)
		}
		last = j.EndedBoot
		delete(ended, j)
	}
	if len(ended) > 0 {
		t.Fatalf("%s: %d listed ended jobs not in the index of ended jobs", step, len(ended))
	}
	n := 0
	for name, js := range m.leaseJobs {
		for j := range js {
			if m.jobs[j.ID] != j || j.Lease != name {
				t.Fatalf("%s: lease %s indexes job %s, not listed under it", step, name, j.ID)
			}
			n++
		}
	}
	if n != withLease {
		t.Fatalf("%s: leases index %d jobs, %d listed have a lease", step, n, withLease)
	}
}

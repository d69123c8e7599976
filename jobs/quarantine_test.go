package jobs

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// A hand-edited registry whose entry names a cgroup other than <root>/jobs/<id> is
// quarantined at start (issue 21 item 7): the job is not loaded, so the dead-man switch
// never ends the processes of that other cgroup nor removes it.
func TestRegistryCgroupElsewhereQuarantined(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.Grace = 100 * time.Millisecond })
	job := spawn(t, `exec sleep 600`)
	if _, err := f.m.Register(api.JobRequest{ID: "edited", PID: job.Process.Pid, TTL: dur(200 * time.Millisecond)}, Caller{}); err != nil {
		t.Fatal(err)
	}
	// Another cgroup with a "service" in it, outside <root>/jobs.
	other := filepath.Join(f.root, "service")
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	svc := spawn(t, `exec sleep 600`)
	if err := os.WriteFile(filepath.Join(other, "cgroup.procs"), []byte(strconv.Itoa(svc.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}
	journal := filepath.Join(f.opts.RegistryDir, journalName)
	doc, err := os.ReadFile(journal)
	if err != nil {
		t.Fatal(err)
	}
	f.shutdown()
	edited := strings.ReplaceAll(string(doc), filepath.Join(f.root, "jobs", "edited"), other)
	if edited == string(doc) {
		t.Fatal("the journal does not name the job's cgroup")
	}
	os.WriteFile(journal, []byte(edited), 0o600)
	var events []api.Event
	f.opts.Events = func(e api.Event) { events = append(events, e) }
	f.start()
	if v, ok := f.m.Get("edited"); ok {
		t.Fatalf("the edited entry was loaded: %+v", v)
	}
	time.Sleep(500 * time.Millisecond) // past the entry's lease: nothing may act on it
	if !alive(svc.Process.Pid) {
		t.Fatal("the process of the cgroup a hand-edited entry named was ended")
	}
	if _, err := os.Stat(other); err != nil {
		t.Fatalf("the cgroup a hand-edited entry named was removed: %v", err)
	}
	found := false
	for _, e := range events {
		found = found || strings.Contains(e.Message, "quarantined") && e.Subject == "edited"
	}
	if !found {
		t.Errorf("no event says the entry was quarantined: %+v", events)
	}
}

package main

import (
	"testing"

	"github.com/sandboxd/sandboxd/api"
)

// TestLeakSummarySaysWhatCleanDid: `jobs leaks --clean` said "1 leak(s) found and cleaned"
// while its own line above said "could not end: jobs_unavailable ..." and the process
// ran on.
func TestLeakSummarySaysWhatCleanDid(t *testing.T) {
	ok, failed := api.Leak{Cleaned: true}, api.Leak{Error: "jobs_unavailable: create cgroup"}
	for _, c := range []struct {
		leaks []api.Leak
		clean bool
		want  string
	}{
		{[]api.Leak{failed}, false, "found"},
		{[]api.Leak{ok}, true, "found and cleaned (still a failure: they had leaked)"},
		{[]api.Leak{failed}, true, "found; none could be ended (see above)"},
		{[]api.Leak{ok, failed}, true, "found; 1 ended, 1 could not be (see above)"},
	} {
		if got := leakSummary(c.leaks, c.clean); got != c.want {
			t.Errorf("leakSummary(%+v, %v) = %q, want %q", c.leaks, c.clean, got, c.want)
		}
	}
}

package jobs

import "testing"

// TestRearmWakesOnlyForAnEarlierDeadline: a registration, a heartbeat or a lease renewal
// wakes the dead-man switch only when its deadline comes before the switch's next look
// (armedAt), when no job was live at its last look (the first live job's tick is written
// down at once), or before the first look: otherwise the look already planned covers it,
// and nothing walks the jobs for it (issue 27).
func TestRearmWakesOnlyForAnEarlierDeadline(t *testing.T) {
	for _, tc := range []struct {
		name          string
		armedAt, due  int64
		idle, wantsUp bool
	}{
		{"before the first look", 0, 5e9, false, true},
		{"due after the next look", 2e9, 5e9, false, false},
		{"due at the next look", 2e9, 2e9, false, false},
		{"due before the next look", 2e9, 1e9, false, true},
		{"no job live at the last look", 2e9, 5e9, true, true},
	} {
		m := &Manager{wake: make(chan struct{}, 1), armedAt: tc.armedAt, idle: tc.idle}
		m.rearmLocked(tc.due)
		if woke := len(m.wake) == 1; woke != tc.wantsUp {
			t.Errorf("%s: woke %v, want %v", tc.name, woke, tc.wantsUp)
		}
	}
}

package daemon

import (
	"context"
	"errors"
	"testing"
	"time"
)

// callDeadline answers as the context.WithTimeout it replaces on a launch's path:
// its deadline passes whether or not Done was asked for, a stop cancels it, the
// parent's end ends it, and values come from the parent.
func TestCallDeadlineIsAContextWithTimeout(t *testing.T) {
	type key struct{}
	parent := context.WithValue(context.Background(), key{}, "v")
	wait := func(done <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: Done never closed", what)
		}
	}

	// Never armed: the deadline passes all the same.
	c, stop := withCallDeadline(parent, time.Nanosecond)
	for deadline := time.Now().Add(30 * time.Second); c.Err() == nil; {
		if time.Now().After(deadline) {
			t.Fatal("Err stayed nil past the deadline")
		}
		time.Sleep(time.Millisecond)
	}
	if !errors.Is(c.Err(), context.DeadlineExceeded) {
		t.Fatalf("Err = %v, want DeadlineExceeded", c.Err())
	}
	wait(c.Done(), "past deadline")
	stop()
	if !errors.Is(c.Err(), context.DeadlineExceeded) || c.Value(key{}) != "v" {
		t.Fatalf("after stop: Err %v (want DeadlineExceeded: it passed first), Value %v", c.Err(), c.Value(key{}))
	}

	// Armed, then stopped before the deadline: Canceled, Done closed.
	c, stop = withCallDeadline(parent, time.Hour)
	if c.Err() != nil {
		t.Fatalf("fresh: Err = %v", c.Err())
	}
	done := c.Done()
	select {
	case <-done:
		t.Fatal("Done closed before the deadline or a stop")
	default:
	}
	stop()
	wait(done, "stopped")
	if !errors.Is(c.Err(), context.Canceled) {
		t.Fatalf("stopped: Err = %v, want Canceled", c.Err())
	}

	// Never armed, stopped: Canceled, and a Done asked for afterwards is closed.
	c, stop = withCallDeadline(parent, time.Hour)
	stop()
	if !errors.Is(c.Err(), context.Canceled) {
		t.Fatalf("stopped unarmed: Err = %v", c.Err())
	}
	wait(c.Done(), "Done after stop")

	// The parent's end ends it, armed or not; the earlier deadline is the parent's.
	pctx, pcancel := context.WithTimeout(parent, time.Minute)
	c, stop = withCallDeadline(pctx, time.Hour)
	defer stop()
	if d, ok := c.Deadline(); !ok || d.After(time.Now().Add(2*time.Minute)) {
		t.Fatalf("Deadline = %v %v, want the parent's (in a minute)", d, ok)
	}
	c2, stop2 := withCallDeadline(pctx, time.Hour)
	defer stop2()
	d2 := c2.Done()
	pcancel()
	if !errors.Is(c.Err(), context.Canceled) {
		t.Fatalf("parent cancelled: Err = %v", c.Err())
	}
	wait(c.Done(), "parent cancelled, armed after")
	wait(d2, "parent cancelled, armed before")
	// A child context of it (as a measurement's hand-off or a reclaim makes) ends with it.
	c3, stop3 := withCallDeadline(parent, time.Hour)
	child, childCancel := context.WithCancel(c3)
	defer childCancel()
	stop3()
	wait(child.Done(), "child of a stopped call")
}

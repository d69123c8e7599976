package pressure

import (
	"testing"
	"time"
)

// sandboxd's own declared writes are not growth; writes beyond the declaration are, and a
// declaration lapses, so it cannot hide later writes (issue 10, item 2).
func TestOwnWritesAreNotGrowth(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	g := newGrowth(10*time.Minute, time.Second)
	g.add(t0, 1<<30)
	g.ownWrite(t0, 256<<20)
	g.add(t0.Add(time.Second), 1<<30-128<<20) // half the reserve written by this sample
	g.add(t0.Add(2*time.Second), 1<<30-256<<20)
	if r := g.rate(t0.Add(2 * time.Second)); r != 0 {
		t.Fatalf("the declared reserve read as growth: %.0f B/s", r)
	}
	g.add(t0.Add(3*time.Second), 1<<30-256<<20-3<<20) // a user writes 3 MiB
	if r := g.rate(t0.Add(3 * time.Second)); r != float64(3<<20)/3 {
		t.Fatalf("a user's 3 MiB over 3 s read as %.0f B/s", r)
	}
	g.ownWrite(t0.Add(4*time.Second), 64<<20) // declared, never written
	g.add(t0.Add(time.Minute), 1<<30-256<<20-3<<20-64<<20)
	if r := g.rate(t0.Add(time.Minute)); r != float64(67<<20)/60 {
		t.Fatalf("a lapsed declaration hid writes: %.0f B/s", r)
	}
}

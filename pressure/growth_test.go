package pressure

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The growth rate is the net rate of others' usage: sandboxd's own writes and frees are
// accounted and kept out, a free by anyone else lowers it (issue 10, item 2).
func TestGrowthIsNetOfOwnChanges(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	g := newGrowth(time.Minute, time.Second) // levels of 3 s, quiet period 12 s
	avail := int64(1 << 30)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	s := 0
	step := func(delta int64) float64 {
		s++
		avail += delta
		g.add(at(s), uint64(avail))
		return g.estimate(at(s)).rate
	}
	// sandboxd writes its 256 MiB reserve, announced first, seen over two samples.
	g.add(at(0), uint64(avail))
	g.ownWrite(256 << 20)
	step(-128 << 20)
	step(-128 << 20)
	for i := 0; i < 20; i++ {
		if r := step(0); r != 0 {
			t.Fatalf("second %d: sandboxd's reserve read as %.0f B/s of growth", s, r)
		}
	}
	// Others write 1 MiB/s while sandboxd frees 8 MiB every 5 s (announced after the
	// delete, so the sample between sees the free before its announcement). Once the
	// window holds only the writes, the rate is theirs.
	var r float64
	for i := 1; i <= 120; i++ {
		d := int64(-1 << 20)
		if i%5 == 0 {
			d += 8 << 20
			r = step(d)
			g.ownWrite(-8 << 20)
		} else {
			r = step(d)
		}
		if i > 63 && (r < 0.97*(1<<20) || r > 1.03*(1<<20)) {
			t.Fatalf("second %d: growth %.0f B/s under 1 MiB/s of writes and sandboxd's frees", s, r)
		}
	}
	// A storm of launches, each a Measure and so a sample, between two ticks: the history
	// stays (the cap on points would otherwise leave a window of a moment, and no rate).
	before := g.estimate(at(s)).rate
	for i := 0; i < 10_000; i++ {
		g.add(at(s).Add(time.Duration(i+1)*50*time.Microsecond), uint64(avail))
	}
	if r := step(-1 << 20); r < 0.97*before || r > 1.03*before {
		t.Fatalf("after a storm of samples: growth %.0f B/s, %.0f before", r, before)
	}
	// A user deletes 30 MiB and stops writing: not filling.
	step(30 << 20)
	for i := 0; i < 20; i++ {
		r = step(0)
	}
	if r != 0 {
		t.Fatalf("after the user's delete and no writes: growth %.0f B/s", r)
	}
}

// BenchmarkGrowthRate is the growth part of one sample with the default windows full
// (10m of 1 s samples), beside the statfs that every sample makes anyway and the
// estimator issue 24 replaced (old-*): "sample" is a new sample and its estimate, as
// the sampling loop takes it; "launch" a Measure within half an interval of the last
// sample (a storm of launches), which the windows do not take; "churn" a sample of a
// filesystem under net-zero churn.
func BenchmarkGrowthRate(b *testing.B) {
	t0 := time.Unix(1_000_000, 0)
	const warm = 700
	fill := func(i int) uint64 { return uint64(1<<30 - i<<20) }
	churn := func(i int) uint64 { return uint64(1<<30 - (i%3)*50<<20) }
	for _, c := range []struct {
		name  string
		avail func(int) uint64
	}{{"sample", fill}, {"churn", churn}} {
		b.Run(c.name, func(b *testing.B) {
			g := newGrowth(10*time.Minute, time.Second)
			i := 0
			for ; i < warm; i++ {
				g.add(t0.Add(time.Duration(i)*time.Second), c.avail(i))
			}
			for b.Loop() {
				at := t0.Add(time.Duration(i) * time.Second)
				g.add(at, c.avail(i))
				g.estimate(at)
				i++
			}
		})
		b.Run("old-"+c.name, func(b *testing.B) {
			g := newOldGrowth(10*time.Minute, time.Second)
			i := 0
			for ; i < warm; i++ {
				g.add(t0.Add(time.Duration(i)*time.Second), c.avail(i))
			}
			for b.Loop() {
				at := t0.Add(time.Duration(i) * time.Second)
				g.add(at, c.avail(i))
				g.rate(at)
				i++
			}
		})
	}
	b.Run("launch", func(b *testing.B) {
		g := newGrowth(10*time.Minute, time.Second)
		for i := 0; i < warm; i++ {
			g.add(t0.Add(time.Duration(i)*time.Second), fill(i))
		}
		at := t0.Add(warm * time.Second)
		for b.Loop() {
			at = at.Add(time.Microsecond)
			g.add(at, fill(warm))
			g.estimate(at)
		}
	})
	b.Run("old-launch", func(b *testing.B) {
		g := newOldGrowth(10*time.Minute, time.Second)
		for i := 0; i < warm; i++ {
			g.add(t0.Add(time.Duration(i)*time.Second), fill(i))
		}
		at := t0.Add(warm * time.Second)
		for b.Loop() {
			at = at.Add(time.Microsecond)
			g.add(at, fill(warm))
			g.rate(at)
		}
	})
	b.Run("statfs", func(b *testing.B) {
		var st unix.Statfs_t
		for b.Loop() {
			unix.Statfs("/", &st)
		}
	})
}

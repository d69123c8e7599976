package main

import (
	"time"

	"github.com/sandboxd/sandboxd/reclaim"
)

// disk is the model of one sandbox's filesystem: what holds its bytes, by kind. Only the
// caches and the launcher's expired files are regenerable; the system, the user's data,
// the checkouts, the build outputs and a runaway file are not.
type disk struct {
	size                               int64
	system, user, checkouts, churn     int64
	runaway                            int64
	store, storeUnref, pkg, buildCache int64
	reserve                            int64
	site                               []siteHour // launcher files by the hour they were written
	siteBytes                          int64

	// Refills scheduled by prunes: bytes the tools download again over the next active
	// minutes (a load-bearing cache refills almost all of it).
	refills []refill
	// Refill histories of the two download caches: the same rule the daemon runs
	// (reclaim.RefillHistory), fed with the model's sizes.
	storeHist, pkgHist reclaim.RefillHistory
}

type siteHour struct {
	hour  int64
	bytes int64
}

// refill is what one prune brings back: perMin bytes into a cache for minutes more
// active minutes.
type refill struct {
	cache   *int64
	perMin  float64
	minutes int
}

func (d *disk) used() int64 {
	return d.system + d.user + d.checkouts + d.churn + d.runaway + d.store + d.pkg + d.buildCache + d.siteBytes + d.reserve
}

func (d *disk) avail() int64 { return max(d.size-d.used(), 0) }

// addSite records launcher files written at t.
func (d *disk) addSite(t time.Time, b int64) {
	h := t.Unix() / 3600
	if n := len(d.site); n > 0 && d.site[n-1].hour == h {
		d.site[n-1].bytes += b
	} else {
		d.site = append(d.site, siteHour{h, b})
	}
	d.siteBytes += b
}

// pruneSite deletes the launcher files older than maxAge at t and returns what it freed.
func (d *disk) pruneSite(t time.Time, maxAge time.Duration) int64 {
	cut := t.Add(-maxAge).Unix() / 3600
	var freed int64
	i := 0
	for i < len(d.site) && d.site[i].hour < cut {
		freed += d.site[i].bytes
		i++
	}
	if i > 0 {
		d.site = append(d.site[:0], d.site[i:]...)
		d.siteBytes -= freed
	}
	return freed
}

// take frees up to want bytes from *c and returns what it freed.
func take(c *int64, want int64) int64 {
	n := min(*c, max(want, 0))
	*c -= n
	return n
}

// Package retention owns sandboxd's write sites: the launchers' temp dirs (such as
// /tmp/aura-bg) where every detached command leaves a handful of small files. It keeps an
// in-memory index of each site, grouped by job and ordered by expiry, current through
// inotify with periodic full rescans; it decides which jobs are still running from
// /proc/locks and the jobs' pid files (CONTRACT §8) without ever trusting the wall clock
// for that; and it prunes expired and over-limit jobs, whole jobs at a time, through
// internal/safefs. A launch call does bounded work (Manager.Prune) and the rest of a
// backlog drains in the background, one rate-limited worker per site.
//
// Why an index and not a scan per call: unlinking costs ~200-340 µs per small file on
// ext4 and scanning ~4-7 µs per entry (FIELD-NOTES "Retention at write sites"), so a
// launch with nothing expired must cost O(1), and finding what to prune O(expired).
package retention

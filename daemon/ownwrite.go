package daemon

import "golang.org/x/sys/unix"

// stateWrite tells the pressure watcher of a state document sandboxd is about to write at
// path (n bytes, rounded to a block). The document replaces the one there, so what it
// adds to the filesystem is n less what the old one holds: the growth rate is net, and
// announcing every rewrite whole would read each as space that others freed, hiding a
// writer at up to the rate of the state writes.
func (d *Daemon) stateWrite(path string, n int64) {
	var st unix.Stat_t
	if unix.Lstat(path, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
		n -= st.Blocks * 512
	}
	if c := d.current(); c != nil && c.pressure != nil && n != 0 {
		c.pressure.OwnWrite(path, n)
	}
}

// ownFree accounts bytes retention freed with the pressure watcher current at the call
// (a reload may replace it; none yet while the first components are built).
func (d *Daemon) ownFree(path string, n int64) {
	if c := d.current(); c != nil && c.pressure != nil {
		c.pressure.OwnFree(path, n)
	}
}

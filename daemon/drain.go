package daemon

import (
	"strings"

	"github.com/sandboxd/sandboxd/api"
)

// underPressure reports whether the watched filesystem that holds path has DiskPressure
// or InodePressure now: a site's background drain then ignores its drain_rate (CONTRACT
// §5). The filesystem is found by its mountpoint from the last samples, by name: no
// syscall touches path, which may lie on a hung mount.
func (d *Daemon) underPressure(path string) bool {
	c := d.current()
	subject, best := "", -1
	for _, fs := range c.pressure.Snapshot() {
		mp := fs.Mountpoint
		if mp == "" || len(mp) <= best {
			continue
		}
		if path == mp || strings.HasPrefix(path, strings.TrimSuffix(mp, "/")+"/") {
			subject, best = fs.Path, len(mp)
		}
	}
	if subject == "" {
		return false
	}
	for _, cond := range c.pressure.Conditions() {
		if cond.Subject == subject && cond.Status && (cond.Type == api.CondDiskPressure || cond.Type == api.CondInodePressure) {
			return true
		}
	}
	return false
}

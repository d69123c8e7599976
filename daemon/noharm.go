package daemon

import "github.com/sandboxd/sandboxd/retention"

// siteUsage is what every site holds, an upper bound of ladder rung 1.
func siteUsage(sites *retention.Manager) (bytes, files int64) {
	for _, s := range sites.Snapshot() {
		bytes += max(s.Bytes, 0)
		files += max(s.Files, 0)
	}
	return bytes, files
}

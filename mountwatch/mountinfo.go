package mountwatch

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/sandboxd/sandboxd/internal/mountinfo"
)

// mountEntry is one mountinfo entry with the owner mountwatch probes as.
type mountEntry struct {
	mountinfo.Entry
	// UserID is the owner from the user_id= super option; -1 when absent.
	UserID  int
	GroupID int
}

// isFUSE reports whether an fstype is served by FUSE (fuse, fuse.geesefs, fuseblk).
func isFUSE(fstype string) bool {
	return fstype == "fuse" || fstype == "fuseblk" || strings.HasPrefix(fstype, "fuse.")
}

// readMountinfo reads <procRoot>/self/mountinfo. Reading it never blocks on a hung
// FUSE mount (FIELD-NOTES), so it is safe on the supervisor loop.
func readMountinfo(procRoot string) ([]mountEntry, error) {
	b, err := os.ReadFile(filepath.Join(procRoot, "self", "mountinfo"))
	if err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	return parseMountinfo(b)
}

// parseMountinfo parses proc(5) mountinfo text (internal/mountinfo) and reads each
// entry's owner. Malformed lines are skipped and reported in the error together with
// the entries that did parse.
func parseMountinfo(b []byte) ([]mountEntry, error) {
	es, err := mountinfo.Parse(b)
	out := make([]mountEntry, 0, len(es))
	for _, e := range es {
		out = append(out, mountEntry{Entry: e, UserID: optID(e.SuperOpts, "user_id"), GroupID: optID(e.SuperOpts, "group_id")})
	}
	return out, err
}

// optID is a numeric super option such as user_id=1000, or -1.
func optID(opts map[string]string, key string) int {
	if v, ok := opts[key]; ok {
		if n, err := strconv.Atoi(v); err == nil && n >= 0 {
			return n
		}
	}
	return -1
}

// topmostAt returns the last (topmost) mountinfo entry whose mountpoint is path.
func topmostAt(entries []mountEntry, path string) (mountEntry, bool) {
	for i := len(entries) - 1; i >= 0; i-- {
		if entries[i].MountPoint == path {
			return entries[i], true
		}
	}
	return mountEntry{}, false
}

package safefs

import (
	"fmt"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// CheckOwner vets the root directory itself, as systemd-tmpfiles and tmpreaper learned to:
// a guessable directory in a shared /tmp can be pre-created by another user. It must be a
// directory owned by uid 0 or one of allowedUIDs, and not group- or world-writable unless
// the sticky bit is set (then others cannot remove or replace each other's entries). The
// answer is a sentence a person can act on, or "" when the root is fine.
func (r *Root) CheckOwner(allowedUIDs ...uint32) string {
	var st unix.Stat_t
	if err := unix.Fstat(r.fd, &st); err != nil {
		return fmt.Sprintf("root %s cannot be examined: %v", r.path, err)
	}
	var problems []string
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		problems = append(problems, "is not a directory")
	}
	if st.Uid != 0 && !slices.Contains(allowedUIDs, st.Uid) {
		who := "root"
		if len(allowedUIDs) > 0 {
			ids := make([]string, len(allowedUIDs))
			for i, u := range allowedUIDs {
				ids[i] = fmt.Sprint(u)
			}
			who = "root or site owner (uid " + strings.Join(ids, ", ") + ")"
		}
		problems = append(problems, fmt.Sprintf("is owned by uid %d, not %s", st.Uid, who))
	}
	if w := st.Mode & 0o022; w != 0 && st.Mode&unix.S_ISVTX == 0 {
		kind := "world-writable"
		switch w {
		case 0o020:
			kind = "group-writable"
		case 0o022:
			kind = "group- and world-writable"
		}
		problems = append(problems, fmt.Sprintf("is %s (mode %04o) without the sticky bit", kind, st.Mode&0o7777))
	}
	if len(problems) == 0 {
		return ""
	}
	return "root " + r.path + " " + strings.Join(problems, " and ")
}

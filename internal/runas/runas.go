// Package runas builds the credential a child runs under when sandboxd acts for a file's
// owner (a cache tool's gc as the cache's owner, a mount probe as the FUSE mount's owner):
// the owner's uid, primary gid and supplementary groups from the user database. Never the
// daemon's own supplementary groups: a child that kept root's group 0 could read and
// write what only root's group may.
package runas

import (
	"os"
	"os/user"
	"strconv"
	"syscall"
)

// Credential returns the credential to run a child as uid:gid with uid's supplementary
// groups, or nil when that is who the daemon already is. A uid the user database does
// not know gets no supplementary groups at all.
func Credential(uid, gid uint32) *syscall.Credential {
	if uid == uint32(os.Geteuid()) && gid == uint32(os.Getegid()) {
		return nil
	}
	return &syscall.Credential{Uid: uid, Gid: gid, Groups: Groups(uid)}
}

// Groups lists uid's group ids as the user database has them (its primary group and every
// group that names it), or none when it cannot say.
func Groups(uid uint32) []uint32 {
	out := []uint32{} // empty, not nil: setgroups(0) drops the daemon's own
	u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10))
	if err != nil {
		return out
	}
	ids, err := u.GroupIds()
	if err != nil {
		return out
	}
	for _, id := range ids {
		if g, err := strconv.ParseUint(id, 10, 32); err == nil {
			out = append(out, uint32(g))
		}
	}
	return out
}

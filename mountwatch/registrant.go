package mountwatch

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/runas"
	"github.com/sandboxd/sandboxd/internal/safefs"
)

// A registered mount never does more than the peer who registered it could do itself
// (issue 12, the review's privilege escalation): its remount and refresh commands run as
// that peer with the peer's supplementary groups, its probes too, its links are made and
// removed with the peer's filesystem credentials (runas.AsFS, so the kernel judges each
// operation), its credential_file is read as the peer, and the steps only root can take
// (umount, a lazy umount, the immutable guard, restarting a systemd unit, aborting a
// connection the peer does not own) are skipped, each with an event saying so. Add refuses
// upfront (ErrForbidden) what the peer could not do: a link in a directory it may not
// write, a mount path it neither owns nor may replace, a remount_unit, the guard.

// Registrant is the peer that registered a mount (SO_PEERCRED and SO_PEERGROUPS of its
// connection).
type Registrant struct {
	UID, GID uint32
	Groups   []uint32
	// PidNS is the registering process's pid namespace ("pid:[4026531836]"), for the
	// record; "" when it could not be read.
	PidNS string
}

// ErrForbidden: the registrant could not do itself what the registration asks: 403.
var ErrForbidden = errors.New("forbidden")

// isRoot reports whether r acts with the daemon's full rights: no registrant (a configured
// mount) or uid 0.
// A peer with the daemon's own uid acts as the daemon too (it has its rights already, and
// a non-root daemon could not switch credentials).
func (r *Registrant) isRoot() bool { return r == nil || r.UID == 0 || r.UID == uint32(os.Geteuid()) }

// cred is the credential to run r's commands and file operations with; nil for root.
func (r *Registrant) cred() *syscall.Credential {
	if r.isRoot() {
		return nil
	}
	groups := append([]uint32{}, r.Groups...) // empty, not nil: setgroups(0) drops the daemon's
	return &syscall.Credential{Uid: r.UID, Gid: r.GID, Groups: groups}
}

// Cred is the credential r's commands and file operations run with; nil for root (and
// for a nil r, a configured mount).
func (r *Registrant) Cred() *syscall.Credential { return r.cred() }

// api is r as the mount object shows it.
func (r *Registrant) api() *api.Registrant {
	if r == nil {
		return nil
	}
	return &api.Registrant{UID: r.UID, GID: r.GID, Groups: append([]uint32{}, r.Groups...), PidNS: r.PidNS}
}

func (r *Registrant) String() string {
	if r.isRoot() {
		return "root"
	}
	return fmt.Sprintf("uid %d", r.UID)
}

// jobCgroup is the cgroup of the job m is tied to, where its commands start; "" for none.
// Read under w.mu: Retie sets it once the jobs registry is loaded.
func (w *Watcher) jobCgroup(m *mount) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if m.reg == nil {
		return ""
	}
	return m.reg.JobCgroup
}

// by is who registered m: nil for a configured mount (root).

func (m *mount) by() *Registrant {
	if m.reg == nil {
		return nil
	}
	return m.reg.By
}

// inGroup reports whether gid is r's primary or a supplementary group.
func (r *Registrant) inGroup(gid uint32) bool {
	return r.GID == gid || slices.Contains(r.Groups, gid)
}

// permits says whether r has all of want (bits of 07: 4 read, 2 write, 1 search) on an
// inode of st by its mode bits, as the kernel's generic_permission picks the class: the
// owner's bits for the owner, else the group's for a member, else the others'. (ACLs are
// not read here; the operations themselves run with r's credentials and the kernel has
// the last word.)
func (r *Registrant) permits(st *unix.Stat_t, want uint32) bool {
	mode := st.Mode
	var bits uint32
	switch {
	case st.Uid == r.UID:
		bits = (mode >> 6) & 7
	case r.inGroup(st.Gid):
		bits = (mode >> 3) & 7
	default:
		bits = mode & 7
	}
	return bits&want == want
}

// forbid is an ErrForbidden naming the path and why.
func forbid(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrForbidden)
}

// writeReason says why r may not create and remove entries in dir ("" when it may): dir,
// an absolute path, is walked from "/" by safefs with r's filesystem credentials (no
// symlink in any component, every ancestor searchable by r); when entry is not empty and
// exists there, r must also be allowed to remove it (the sticky rule: in a sticky
// directory only the entry's owner or the directory's may). A mounted entry is never
// looked at (a hung FUSE server would stall the caller): in a sticky directory that is
// not r's own it is refused, its owner being hidden beneath the mount.
func (r *Registrant) writeReason(dir, entry string, mounted bool) (string, error) {
	var why string
	err := runas.AsFS(r.cred(), func() error {
		root, err := safefs.OpenRoot(dir)
		switch {
		case errors.Is(err, unix.EACCES):
			why = fmt.Sprintf("%s cannot reach the directory %s (a directory on the way is not searchable by it)", r, dir)
			return nil
		case errors.Is(err, unix.ENOENT):
			why = fmt.Sprintf("the directory %s does not exist; it must exist and be writable by %s when the mount is registered", dir, r)
			return nil
		case err != nil:
			why = err.Error()
			return nil
		}
		defer root.Close()
		var st unix.Stat_t
		if err := unix.Fstat(root.Fd(), &st); err != nil {
			return err
		}
		if !r.permits(&st, 3) {
			why = fmt.Sprintf("the directory %s (owner uid %d, group %d, mode %04o) is not writable by %s (groups %v)",
				dir, st.Uid, st.Gid, st.Mode&0o7777, r, append([]uint32{r.GID}, r.Groups...))
			return nil
		}
		sticky := st.Mode&unix.S_ISVTX != 0 && st.Uid != r.UID
		if entry == "" {
			return nil
		}
		if mounted {
			if sticky {
				why = fmt.Sprintf("%s is a mount point in the sticky directory %s (mode %04o, owner uid %d): whether %s may replace it cannot be told without looking into the mount",
					filepath.Join(dir, entry), dir, st.Mode&0o7777, st.Uid, r)
			}
			return nil
		}
		var e unix.Stat_t
		switch err := unix.Fstatat(root.Fd(), entry, &e, unix.AT_SYMLINK_NOFOLLOW); {
		case errors.Is(err, unix.ENOENT):
			return nil
		case err != nil:
			why = fmt.Sprintf("%s: %v", filepath.Join(dir, entry), err)
			return nil
		}
		if sticky && e.Uid != r.UID {
			why = fmt.Sprintf("%s belongs to uid %d and the directory %s is sticky (mode %04o, owner uid %d): %s may not remove or replace it",
				filepath.Join(dir, entry), e.Uid, dir, st.Mode&0o7777, st.Uid, r)
		}
		return nil
	})
	return why, err
}

// checkRegistrant refuses, for a registrant other than root, what it could not do itself.
// entries is mountinfo, to recognise the registrant's own FUSE mount on the path.
func checkRegistrant(c MountConfig, r *Registrant, entries []mountEntry) error {
	if r.isRoot() {
		return nil
	}
	if c.RemountUnit != "" {
		return forbid("remount_unit %q: restarting a systemd unit is done as root; only root may register a mount with one (use remount_command, which runs as %s)", c.RemountUnit, r)
	}
	if c.Guard {
		return forbid("guard: the immutable flag on the bare mountpoint needs root (CAP_LINUX_IMMUTABLE) and would make %s's own fusermount3 fail there; register with \"guard\": false", r)
	}
	if err := r.mayUsePath(c.Path, entries); err != nil {
		return err
	}
	for i, l := range c.Links {
		why, err := r.writeReason(filepath.Dir(l.Path), filepath.Base(l.Path), false)
		if err != nil {
			return err
		}
		if why != "" {
			return forbid("links[%d] %s: a link is made and removed with the rights of %s, who registered it, and %s", i, l.Path, r, why)
		}
	}
	return nil
}

// mayUsePath: a registrant other than root registers only a path that is its own: one on
// which its own FUSE mount sits (the kernel's user_id of the connection), a directory it
// owns, or one in a directory it may write (it could replace it with its own).
func (r *Registrant) mayUsePath(path string, entries []mountEntry) error {
	if e, ok := topmostAt(entries, path); ok && isFUSE(e.FSType) && e.UserID >= 0 && uint32(e.UserID) == r.UID {
		return nil
	} else if ok {
		// Another's mount: the directory beneath cannot be looked at without touching that
		// mount; the parent decides.
		why, err := r.writeReason(filepath.Dir(path), filepath.Base(path), true)
		if err != nil || why == "" {
			return err
		}
		return forbid("path %s: a %s mount of uid %d sits there, not one of %s, and %s", path, e.FSType, e.UserID, r, why)
	}
	owner, found, isDir := uint32(0), false, false
	_ = runas.AsFS(r.cred(), func() error {
		dir, base, err := safefs.OpenParent(path)
		if err != nil {
			return err
		}
		defer dir.Close()
		var st unix.Stat_t
		if unix.Fstatat(dir.Fd(), base, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			owner, found = st.Uid, true
			isDir = st.Mode&unix.S_IFMT == unix.S_IFDIR
		}
		return nil
	})
	if found && isDir && owner == r.UID {
		return nil
	}
	why, err := r.writeReason(filepath.Dir(path), filepath.Base(path), false)
	if err != nil || why == "" {
		return err
	}
	if found {
		return forbid("path %s is owned by uid %d, not %s, and %s", path, owner, r, why)
	}
	return forbid("path %s: %s", path, why)
}

package runas

import (
	"fmt"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// AsFS runs f with the filesystem credentials of cred (fsuid, fsgid and supplementary
// groups), so that the kernel decides each path lookup, create and unlink f makes as it
// would for that user: search and write permission, the sticky bit, ACLs. Changing the
// fsuid away from 0 also drops CAP_DAC_OVERRIDE, CAP_FOWNER and the other filesystem
// capabilities of the thread (capabilities(7)). A nil cred runs f as the daemon.
//
// Credentials are per thread in Linux, and the Go scheduler moves goroutines between
// threads; so f runs in a goroutine locked to its OS thread that is never unlocked: when
// it returns the runtime ends the thread, and no other goroutine ever runs with the
// changed credentials (not even if restoring them failed). f must not start goroutines
// that touch the filesystem on its behalf: they would run on other threads, as root.
func AsFS(cred *syscall.Credential, f func() error) error {
	if cred == nil {
		return f()
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread is discarded with this goroutine
		if err := setFS(cred); err != nil {
			done <- err
			return
		}
		done <- f()
	}()
	return <-done
}

// setFS gives the calling thread cred's groups, fsgid and fsuid, and checks that they took.
// (unix.Setgroups is the raw per-thread system call, unlike syscall.Setgroups, which
// changes every thread of the process.)
func setFS(cred *syscall.Credential) error {
	groups := make([]int, 0, len(cred.Groups))
	for _, g := range cred.Groups {
		groups = append(groups, int(g))
	}
	if err := unix.Setgroups(groups); err != nil {
		return fmt.Errorf("act as uid %d: setgroups: %w", cred.Uid, err)
	}
	if err := unix.Setfsgid(int(cred.Gid)); err != nil {
		return fmt.Errorf("act as uid %d: setfsgid %d: %w", cred.Uid, cred.Gid, err)
	}
	if err := unix.Setfsuid(int(cred.Uid)); err != nil {
		return fmt.Errorf("act as uid %d: setfsuid: %w", cred.Uid, err)
	}
	// setfsuid reports no failure other than EPERM: read the values back (-1 changes nothing).
	if got, _ := unix.SetfsuidRetUid(-1); got != int(cred.Uid) {
		return fmt.Errorf("act as uid %d: the thread's fsuid is still %d", cred.Uid, got)
	}
	if got, _ := unix.SetfsgidRetGid(-1); got != int(cred.Gid) {
		return fmt.Errorf("act as uid %d: the thread's fsgid is still %d (want %d)", cred.Uid, got, cred.Gid)
	}
	return nil
}

package e2image

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/api"
)

// ErrInUse says the image is open, locked or backing a loop device: recovering it would
// write under a running VM (or a mounted filesystem) and corrupt it.
var ErrInUse = errors.New("the image is in use")

// Recovery is what `sandboxd image recover` did.
type Recovery struct {
	Before        Report `json:"before"`
	After         Report `json:"after"`
	Replayed      bool   `json:"journal_replayed"`
	Removed       string `json:"reserve_removed,omitempty"`
	FreedBytes    uint64 `json:"freed_bytes"`
	Line          string `json:"line"`
	NothingToFree bool   `json:"nothing_to_free"`
}

// InUse says how the image is in use, "" when it is not: a lock another process holds on
// it (QEMU and other VMMs hold OFD or flock locks on their disks), an open file descriptor
// in some process (/proc/PID/fd, by device and inode), or a loop device backed by it
// (/sys/block/loop*/loop/backing_file). procRoot and sysRoot are /proc and /sys.
func InUse(image, procRoot, sysRoot string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(image, &st); err != nil {
		return "", fmt.Errorf("image %s: %w", image, err)
	}
	var why []string
	if w := lockHolder(image); w != "" {
		why = append(why, w)
	}
	why = append(why, openers(st, procRoot)...)
	why = append(why, loopBacking(st, sysRoot)...)
	return strings.Join(why, "; "), nil
}

// lockHolder tests for a conflicting lock without taking one for long: an OFD write lock
// over the whole file (F_OFD_GETLK), then a non-blocking exclusive flock released at once.
func lockHolder(image string) string {
	f, err := os.OpenFile(image, os.O_RDWR, 0)
	if err != nil {
		f, err = os.Open(image)
		if err != nil {
			return ""
		}
	}
	defer f.Close()
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: 0, Len: 0}
	if unix.FcntlFlock(f.Fd(), unix.F_OFD_GETLK, &lk) == nil && lk.Type != unix.F_UNLCK {
		return "an exclusive lock is held on it (a running VMM locks its disk: fcntl F_OFD_GETLK found a conflicting lock)"
	}
	lk = unix.Flock_t{Type: unix.F_WRLCK}
	if unix.FcntlFlock(f.Fd(), unix.F_GETLK, &lk) == nil && lk.Type != unix.F_UNLCK {
		return fmt.Sprintf("an exclusive lock is held on it by pid %d (fcntl F_GETLK)", lk.Pid)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return "an exclusive lock is held on it (flock LOCK_EX|LOCK_NB: " + err.Error() + ")"
	}
	unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return ""
}

// openers are the processes with the image open, by device and inode under /proc/*/fd.
func openers(img unix.Stat_t, procRoot string) []string {
	pids, _ := os.ReadDir(procRoot)
	self := strconv.Itoa(os.Getpid())
	var out []string
	for _, p := range pids {
		if _, err := strconv.Atoi(p.Name()); err != nil || p.Name() == self {
			continue
		}
		fdDir := filepath.Join(procRoot, p.Name(), "fd")
		fds, err := os.ReadDir(fdDir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			var st unix.Stat_t
			if unix.Stat(filepath.Join(fdDir, fd.Name()), &st) != nil {
				continue
			}
			if st.Dev == img.Dev && st.Ino == img.Ino {
				comm, _ := os.ReadFile(filepath.Join(procRoot, p.Name(), "comm"))
				out = append(out, fmt.Sprintf("pid %s (%s) has it open as fd %s (%s)", p.Name(), strings.TrimSpace(string(comm)), fd.Name(), fdDir))
				break
			}
		}
	}
	return out
}

// loopBacking are the loop devices the image backs.
func loopBacking(img unix.Stat_t, sysRoot string) []string {
	devs, _ := filepath.Glob(filepath.Join(sysRoot, "block", "loop*", "loop", "backing_file"))
	var out []string
	for _, bf := range devs {
		b, err := os.ReadFile(bf)
		if err != nil {
			continue
		}
		path := strings.TrimSuffix(strings.TrimSpace(string(b)), " (deleted)")
		var st unix.Stat_t
		if unix.Stat(path, &st) != nil || st.Dev != img.Dev || st.Ino != img.Ino {
			continue
		}
		dev := filepath.Base(filepath.Dir(filepath.Dir(bf)))
		out = append(out, fmt.Sprintf("it backs /dev/%s (%s): detach it (umount, losetup -d) first", dev, bf))
	}
	return out
}

// writeMarker writes text as the file dst inside the image (debugfs -w write).
func (t Tools) writeMarker(ctx context.Context, image, dst, text string) error {
	// An O_TMPFILE has no name: nothing to remove afterwards, nothing another user can swap.
	// debugfs reads it as its fd 3 (/dev/fd/3).
	fd, err := unix.Open(os.TempDir(), unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("debugfs -w write %s in %s: a temporary file: %w", dst, image, err)
	}
	f := os.NewFile(uintptr(fd), "marker")
	defer f.Close()
	if _, err := f.WriteString(text); err != nil {
		return fmt.Errorf("debugfs -w write %s in %s: a temporary file: %w", dst, image, err)
	}
	cmd := exec.CommandContext(ctx, t.Debugfs, "-w", "-R", fmt.Sprintf("write /dev/fd/3 \"%s\"", dst), image)
	cmd.ExtraFiles = []*os.File{f}
	out, err := cmd.CombinedOutput()
	if err != nil || strings.Contains(string(out), "write:") {
		return fmt.Errorf("debugfs -w write %s in %s: %v: %s", dst, image, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Recover makes room in a stopped VM's image so it boots: it refuses an image in use,
// replays the journal (e2fsck -E journal_only), removes the sandboxd reserve inside
// (debugfs -w), and reports what it freed. Without a reserve it frees nothing and says
// what it would take (need: the room the VM needs to boot) and which setting sizes the
// disk (sizeSetting, "" when not known).
func (t Tools) Recover(ctx context.Context, image string, paths []string, need uint64, sizeSetting, procRoot, sysRoot string) (Recovery, error) {
	var rec Recovery
	why, err := InUse(image, procRoot, sysRoot)
	if err != nil {
		return rec, err
	}
	if why != "" {
		return rec, fmt.Errorf("%w: %s: %s; stop the VM first", ErrInUse, image, why)
	}
	rec.Before, err = t.Check(ctx, image, paths)
	if err != nil {
		return rec, err
	}
	if rec.Before.Journal == "needs recovery" {
		// -E journal_only: replay the journal and stop; exit 0 or 1 (changes made) is success.
		out, err := exec.CommandContext(ctx, t.E2fsck, "-y", "-E", "journal_only", image).CombinedOutput()
		var ee *exec.ExitError
		if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 1) {
			return rec, fmt.Errorf("e2fsck -E journal_only %s: %w: %s", image, err, strings.TrimSpace(string(out)))
		}
		rec.Replayed = true
		// A replay leaves the superblock's free counts as they were before it: a preen pass
		// (-f -p: safe fixes only) recounts them, so "freed" is measured, not guessed.
		out, err = exec.CommandContext(ctx, t.E2fsck, "-f", "-p", image).CombinedOutput()
		if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 1) {
			return rec, fmt.Errorf("e2fsck -f -p %s (after replaying the journal): %w: %s; run e2fsck %s by hand", image, err, strings.TrimSpace(string(out)), image)
		}
		if rec.Before, err = t.Check(ctx, image, paths); err != nil {
			return rec, err
		}
	}
	if rec.Before.Reserve != "" {
		out, err := exec.CommandContext(ctx, t.Debugfs, "-w", "-R", fmt.Sprintf("rm \"%s\"", rec.Before.Reserve), image).CombinedOutput()
		if err != nil || strings.Contains(string(out), "rm:") {
			return rec, fmt.Errorf("debugfs -w rm %s in %s: %v: %s", rec.Before.Reserve, image, err, strings.TrimSpace(string(out)))
		}
		rec.Removed = rec.Before.Reserve
		// The marker next to it tells the guest's daemon the room is the released reserve
		// (not the workload's) and why: it raises BootedFull and removes it on re-arming.
		sized := ""
		if sizeSetting != "" {
			sized = ", sized by " + sizeSetting
		}
		text := fmt.Sprintf("%s was full (%s free of %s%s): `sandboxd image recover` on the host removed the %s reserve at %s; booting in recovery mode: download or remove files\n",
			image, api.FormatSize(rec.Before.AvailBytes), api.FormatSize(rec.Before.SizeBytes), sized,
			api.FormatSize(rec.Before.ReserveSize), time.Now().UTC().Format(time.RFC3339))
		if err := t.writeMarker(ctx, image, rec.Removed+".released", text); err != nil {
			return rec, err
		}
	}
	rec.After, err = t.Check(ctx, image, paths)
	if err != nil {
		return rec, err
	}
	if rec.After.AvailBytes > rec.Before.AvailBytes {
		rec.FreedBytes = rec.After.AvailBytes - rec.Before.AvailBytes
	}
	replayed := ""
	if rec.Replayed {
		replayed = "replayed the journal; "
	}
	sized := "the setting that sizes this VM's disk (name it with --size-setting)"
	if sizeSetting != "" {
		sized = sizeSetting
	}
	switch {
	case rec.Removed != "":
		rec.Line = fmt.Sprintf("%s: %sremoved the sandboxd reserve %s, freed %s: %s free of %s now; the VM can boot (recovery mode: download or remove files; the disk is sized by %s)",
			image, replayed, rec.Removed, api.FormatSize(rec.FreedBytes), api.FormatSize(rec.After.AvailBytes), api.FormatSize(rec.After.SizeBytes), sized)
	default:
		rec.NothingToFree = true
		short := uint64(0)
		if need > rec.After.AvailBytes {
			short = need - rec.After.AvailBytes
		}
		rec.Line = fmt.Sprintf("%s: %sno sandboxd reserve inside (looked at %s): nothing freed; %s free of %s",
			image, replayed, strings.Join(rec.After.Looked, ", "), api.FormatSize(rec.After.AvailBytes), api.FormatSize(rec.After.SizeBytes))
		if short > 0 {
			rec.Line += fmt.Sprintf("; it would take %s more to give the VM the %s it needs to boot: grow the disk by raising %s (or truncate -s +SIZE the image, then e2fsck -f and resize2fs it)",
				api.FormatSize(short), api.FormatSize(need), sized)
		} else {
			rec.Line += fmt.Sprintf("; that is at least the %s the VM needs to boot", api.FormatSize(need))
		}
	}
	return rec, nil
}

package safefs

import (
	"encoding/binary"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// statxMask asks for what Entry and the walks need; STATX_ATTR_MOUNT_ROOT comes in
// Attributes whatever the mask.
const statxMask = unix.STATX_TYPE | unix.STATX_MODE | unix.STATX_NLINK | unix.STATX_UID |
	unix.STATX_INO | unix.STATX_SIZE | unix.STATX_BLOCKS | unix.STATX_MTIME | unix.STATX_ATIME

// statxFlags never follow a final symlink and never trigger an automount: an autofs trap
// inside a cache must not mount anything because we looked at it.
const statxFlags = unix.AT_SYMLINK_NOFOLLOW | unix.AT_NO_AUTOMOUNT | unix.AT_STATX_DONT_SYNC

// statxAt is statx(2) on a NUL-terminated name that lives in a caller's buffer (a getdents
// record), so the hot loops allocate nothing per entry.
func statxAt(dirfd int, name *byte, flags int, stx *unix.Statx_t) error {
	_, _, e := unix.Syscall6(unix.SYS_STATX, uintptr(dirfd), uintptr(unsafe.Pointer(name)),
		uintptr(flags), statxMask, uintptr(unsafe.Pointer(stx)), 0)
	if e != 0 {
		return e
	}
	return nil
}

// unlinkAt is unlinkat(2) on a NUL-terminated name in a caller's buffer.
func unlinkAt(dirfd int, name *byte, flags int) error {
	_, _, e := unix.Syscall(unix.SYS_UNLINKAT, uintptr(dirfd), uintptr(unsafe.Pointer(name)), uintptr(flags))
	if e != 0 {
		return e
	}
	return nil
}

// fstatx stats an open fd.
func fstatx(fd int, stx *unix.Statx_t) error {
	var empty byte // "" for AT_EMPTY_PATH
	return statxAt(fd, &empty, unix.AT_EMPTY_PATH|statxFlags, stx)
}

// isMountRoot reports the statx mount-root attribute, where the kernel knows it.
func isMountRoot(stx *unix.Statx_t) bool {
	return stx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 && stx.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0
}

func stxDev(stx *unix.Statx_t) uint64 { return unix.Mkdev(stx.Dev_major, stx.Dev_minor) }

func stxTime(ts unix.StatxTimestamp) time.Time { return time.Unix(ts.Sec, int64(ts.Nsec)) }

// stxFreed is what unlinking this inode's last name would give back: st_blocks*512 of a
// single-link non-directory, nothing for a hard-linked file (its data stays with the other
// names, e.g. a pnpm store file linked into a project).
func stxFreed(stx *unix.Statx_t) int64 {
	if stx.Nlink != 1 {
		return 0
	}
	return int64(stx.Blocks) * 512
}

// direntIter walks the linux_dirent64 records of one getdents64 result.
type direntIter struct {
	buf []byte
	pos int
}

// next returns the record's type (DT_*) and the index range of its NUL-terminated name;
// ok is false at the end of the buffer.
func (it *direntIter) next() (dtype byte, name []byte, ok bool) {
	_, dtype, name, ok = it.nextIno()
	return dtype, name, ok
}

// nextIno is next with the entry's inode number (d_ino).
func (it *direntIter) nextIno() (ino uint64, dtype byte, name []byte, ok bool) {
	// struct linux_dirent64 { u64 d_ino; s64 d_off; u16 d_reclen; u8 d_type; char d_name[]; }
	const nameOff = 19
	for it.pos+nameOff <= len(it.buf) {
		rec := it.buf[it.pos:]
		reclen := int(*(*uint16)(unsafe.Pointer(&rec[16])))
		if reclen < nameOff || reclen > len(rec) {
			it.pos = len(it.buf)
			return 0, 0, nil, false
		}
		it.pos += reclen
		n := rec[nameOff:reclen]
		end := 0
		for end < len(n) && n[end] != 0 {
			end++
		}
		if end == len(n) || end == 0 {
			continue // no NUL inside the record, or an empty name: malformed, skip it
		}
		n = n[:end+1] // keep the NUL so &n[0] can go straight to a syscall
		if (end == 1 && n[0] == '.') || (end == 2 && n[0] == '.' && n[1] == '.') {
			continue
		}
		return binary.NativeEndian.Uint64(rec[0:8]), rec[18], n, true
	}
	return 0, 0, nil, false
}

// direntBufSize is one getdents64 batch: large enough that a directory of small names
// needs few syscalls, small enough to keep per walk.
const direntBufSize = 32 << 10

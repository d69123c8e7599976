// Package proclocks reads /proc/locks: which inodes are held under a lock. sandboxd
// never takes a lock to find out (trying races the owner's own LOCK_NB, misses POSIX and
// OFD locks, and opening a planted FIFO blocks); retention uses it for job liveness,
// reclaim for whether a package tool (dpkg) is busy.
package proclocks

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// Inode names an inode the way /proc/locks does.
type Inode struct {
	Major, Minor uint32
	Ino          uint64
}

// Parse adds the inodes held under a lock (FLOCK, POSIX and OFDLCK; not LEASE or DELEG)
// to out. A line "N: -> ..." is a waiter, not a holder, and is skipped: a waiter always
// stands behind a holder's line for the same inode. The device field is "%02x:%02x" (hex
// major:minor), the inode decimal: see fs/locks.c lock_get_status. Malformed lines are
// skipped, never fatal.
func Parse(data []byte, out map[Inode]struct{}) {
	for len(data) > 0 {
		var line []byte
		line, data, _ = bytes.Cut(data, []byte{'\n'})
		// id: TYPE ADVISORY|MANDATORY READ|WRITE PID MAJ:MIN:INO START END
		f := strings.Fields(string(line))
		if len(f) < 7 || !strings.HasSuffix(f[0], ":") || f[1] == "->" {
			continue
		}
		switch f[1] {
		case "FLOCK", "POSIX", "OFDLCK":
		default:
			continue
		}
		parts := strings.Split(f[5], ":")
		if len(parts) != 3 {
			continue
		}
		maj, err1 := strconv.ParseUint(parts[0], 16, 32)
		min, err2 := strconv.ParseUint(parts[1], 16, 32)
		ino, err3 := strconv.ParseUint(parts[2], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		out[Inode{uint32(maj), uint32(min), ino}] = struct{}{}
	}
}

// Read reads <procRoot>/locks. A missing file (a kernel without it) is "no locks": no
// data, not an error; an unreadable one is an error, and the caller cannot know.
func Read(procRoot string) (map[Inode]struct{}, error) {
	r := NewReader(procRoot)
	defer r.Close()
	return r.Read()
}

// Reader reads one proc root's locks file again and again through one open fd and one
// buffer: a pread from offset 0 makes the kernel's seq_file list the locks afresh, so
// each Read is as current as Read's open-read-close, at one syscall instead of five (a
// drain reads the file before every batch, hundreds of times a second). It is safe for
// concurrent use.
type Reader struct {
	path string

	mu  sync.Mutex
	f   *os.File // nil until the first Read, and after a failed one
	buf []byte
}

// NewReader reads procRoot's locks file ("/proc" for the host's).
func NewReader(procRoot string) *Reader {
	return &Reader{path: filepath.Join(procRoot, "locks")}
}

// Read is what Read(procRoot) answers. A read that fails closes the fd, so the next
// Read opens the file again.
func (r *Reader) Read() (map[Inode]struct{}, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[Inode]struct{}{}
	if r.f == nil {
		f, err := os.Open(r.path)
		if errors.Is(err, fs.ErrNotExist) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		r.f = f
		if r.buf == nil {
			r.buf = make([]byte, 16<<10)
		}
	}
	var n int
	for {
		var err error
		n, err = r.f.ReadAt(r.buf, 0)
		if err != nil && !errors.Is(err, io.EOF) {
			r.f.Close()
			r.f = nil
			return out, err
		}
		if n < len(r.buf) {
			break
		}
		r.buf = make([]byte, 2*len(r.buf)) // filled it: there may be more
	}
	Parse(r.buf[:n], out)
	return out, nil
}

// Close releases the fd.
func (r *Reader) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return nil
	}
	err := r.f.Close()
	r.f = nil
	return err
}

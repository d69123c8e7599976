package mountwatch

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// MaxCredentialFileSize is the most a credential_file may hold. The AWS credential_process
// document is under 2 KiB; a file past the cap is refused, at registration and at every
// read, rather than read into memory (a caller naming /dev/zero used to OOM the host).
const MaxCredentialFileSize = 64 << 10

// ErrCredentialFile: a credential_file that sandboxd will not read (not a regular file, a
// symlink, larger than MaxCredentialFileSize, unreadable, no Expiration): the registration
// is refused (400) and a saved one is quarantined at start.
var ErrCredentialFile = errors.New("credential file refused")

// credentialReadTimeout bounds one read of a credential file: a file on a hung FUSE mount
// must not stall the loop or a registration.
const credentialReadTimeout = 5 * time.Second

// readBounded reads path, the credential file, without ever blocking or reading without
// bound: opened with O_NONBLOCK (a FIFO's open and read return at once) and O_NOFOLLOW
// (the last component must not be a symlink), accepted only as a regular file (fstat on
// the opened descriptor, so no swap between check and read), and at most
// MaxCredentialFileSize bytes.
func readBounded(path string) ([]byte, fileStamp, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if errors.Is(err, unix.ELOOP) {
		return nil, fileStamp{}, fmt.Errorf("credential file %s is a symlink: name the file itself: %w", path, ErrCredentialFile)
	}
	if err != nil {
		return nil, fileStamp{}, fmt.Errorf("open credential file %s: %w (%w)", path, err, ErrCredentialFile)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fileStamp{}, fmt.Errorf("stat credential file %s: %w (%w)", path, err, ErrCredentialFile)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fileStamp{}, fmt.Errorf("credential file %s is a %s, not a regular file: sandboxd reads only a regular file as a credential: %w",
			path, fileKind(st.Mode), ErrCredentialFile)
	}
	stamp := fileStamp{mtime: time.Unix(st.Mtim.Unix()), size: st.Size}
	if st.Size > MaxCredentialFileSize {
		return nil, stamp, fmt.Errorf("credential file %s holds %d bytes, more than the %d a credential file may: %w",
			path, st.Size, MaxCredentialFileSize, ErrCredentialFile)
	}
	// One byte past the cap tells a file that grew since fstat.
	buf := make([]byte, MaxCredentialFileSize+1)
	n := 0
	for n < len(buf) {
		k, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, stamp, fmt.Errorf("read credential file %s: %w (%w)", path, err, ErrCredentialFile)
		}
		if k == 0 {
			break
		}
		n += k
	}
	if n > MaxCredentialFileSize {
		return nil, stamp, fmt.Errorf("credential file %s grew past the %d bytes a credential file may hold: %w", path, MaxCredentialFileSize, ErrCredentialFile)
	}
	return buf[:n], stamp, nil
}

// fileKind names a file type for an error message.
func fileKind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return "directory"
	case unix.S_IFCHR:
		return "character device"
	case unix.S_IFBLK:
		return "block device"
	case unix.S_IFIFO:
		return "FIFO"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFLNK:
		return "symlink"
	}
	return "special file"
}

// readCredentialBounded is readCredentialAs within credentialReadTimeout: a read still
// blocked then (a file on a hung FUSE mount) is left to finish on its own thread and
// reported as a failure.
func readCredentialBounded(by *Registrant, path string, refreshAt float64) (credential, fileStamp, error) {
	type result struct {
		c     credential
		stamp fileStamp
		err   error
	}
	done := make(chan result, 1)
	go func() {
		c, stamp, err := readCredentialAs(by, path, refreshAt)
		done <- result{c, stamp, err}
	}()
	t := time.NewTimer(credentialReadTimeout)
	defer t.Stop()
	select {
	case r := <-done:
		return r.c, r.stamp, r.err
	case <-t.C:
		return credential{}, fileStamp{}, fmt.Errorf("credential file %s: no answer within %s (a hung filesystem?): %w", path, credentialReadTimeout, ErrCredentialFile)
	}
}

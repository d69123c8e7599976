package retention

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/fsnotify/fsnotify"
	"golang.org/x/sys/unix"
)

// inotifyBatchDelay is how long the reader lets events gather after a read that found
// some. Every event queued while a reader waits in poll costs the writer a wake-up: with
// fsnotify (which waits again after every event) a drain's own unlinks cost three times
// the unlinks themselves. Pausing between reads turns that into one wake-up per batch; the
// kernel queue (max_queued_events, 16,384 by default) holds far more than a pause's worth
// even at 100,000 unlinks a second, and an overflow still means "rescan".
const inotifyBatchDelay = 2 * time.Millisecond

// siteMask is what the site loop needs of its root: entries appearing, going, written,
// changed (utimes shows as IN_ATTRIB), and the root itself going away.
const siteMask = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_MODIFY | unix.IN_ATTRIB | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF |
	unix.IN_ONLYDIR | unix.IN_DONT_FOLLOW | unix.IN_EXCL_UNLINK

// rawWatch is an inotify watch on one directory, read in batches into a pending set.
type rawWatch struct {
	fd   int // the inotify instance (non-blocking)
	stop int // eventfd: written by Close to end the reader
	done chan struct{}
}

// newRawWatch watches dir and feeds p until Close.
func newRawWatch(dir string, p *pending) (*rawWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("inotify_init1: %w", err)
	}
	if _, err := unix.InotifyAddWatch(fd, dir, siteMask); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("inotify_add_watch %s: %w", dir, err)
	}
	stop, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	w := &rawWatch{fd: fd, stop: stop, done: make(chan struct{})}
	go w.read(p)
	return w, nil
}

// Close ends the reader and releases the fds.
func (w *rawWatch) Close() error {
	one := [8]byte{1}
	unix.Write(w.stop, one[:])
	<-w.done
	unix.Close(w.fd)
	unix.Close(w.stop)
	return nil
}

// read is the reader goroutine: read what is queued, hand it over, pause, and wait in
// poll only when the queue is empty.
func (w *rawWatch) read(p *pending) {
	defer close(w.done)
	buf := make([]byte, 64<<10)
	both := []unix.PollFd{{Fd: int32(w.fd), Events: unix.POLLIN}, {Fd: int32(w.stop), Events: unix.POLLIN}}
	stopOnly := both[1:]
	for {
		n, err := unix.Read(w.fd, buf)
		switch {
		case n > 0:
			p.addRaw(buf[:n])
			stopOnly[0].Revents = 0
			if k, _ := unix.Poll(stopOnly, int(inotifyBatchDelay/time.Millisecond)); k > 0 {
				return
			}
			continue
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EAGAIN), n == 0 && err == nil:
		default:
			p.setOverflow() // cannot read: what we miss, a rescan finds
			return
		}
		both[0].Revents, both[1].Revents = 0, 0
		if _, err := unix.Poll(both, -1); err != nil && !errors.Is(err, unix.EINTR) {
			p.setOverflow()
			return
		}
		if both[1].Revents != 0 {
			return
		}
	}
}

// addRaw takes one read's worth of struct inotify_event records under one lock.
func (p *pending) addRaw(buf []byte) {
	p.mu.Lock()
	parseInotify(buf, p.addLocked)
	p.mu.Unlock()
	p.signal()
}

// inotifyHeader is sizeof(struct inotify_event) without its name: wd, mask, cookie, len.
const inotifyHeader = unix.SizeofInotifyEvent

// parseInotify calls add for each record: "" with Remove or Rename for the watched
// directory itself going away (or its watch being dropped), the entry's name and op
// otherwise. A queue overflow is reported as overflow. A malformed record ends the
// parse (the kernel never writes one; the fuzz target proves we do not crash on it).
func parseInotify(buf []byte, add func(name string, op fsnotify.Op, overflow bool)) {
	for len(buf) >= inotifyHeader {
		mask := binary.NativeEndian.Uint32(buf[4:])
		nlen := int(binary.NativeEndian.Uint32(buf[12:]))
		if nlen < 0 || nlen > len(buf)-inotifyHeader {
			return
		}
		raw := buf[inotifyHeader : inotifyHeader+nlen]
		buf = buf[inotifyHeader+nlen:]
		name := raw
		for i, c := range raw {
			if c == 0 {
				name = raw[:i]
				break
			}
		}
		switch {
		case mask&unix.IN_Q_OVERFLOW != 0:
			add("", 0, true)
			continue
		case mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_IGNORED|unix.IN_UNMOUNT) != 0:
			add("", fsnotify.Remove, false)
			continue
		case len(name) == 0:
			continue // an event on the directory itself that we did not ask for
		}
		var op fsnotify.Op
		if mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0 {
			op |= fsnotify.Create
		}
		if mask&unix.IN_DELETE != 0 {
			op |= fsnotify.Remove
		}
		if mask&unix.IN_MOVED_FROM != 0 {
			op |= fsnotify.Rename
		}
		if mask&unix.IN_MODIFY != 0 {
			op |= fsnotify.Write
		}
		if mask&unix.IN_ATTRIB != 0 {
			op |= fsnotify.Chmod
		}
		if op != 0 {
			add(string(name), op, false)
		}
	}
}

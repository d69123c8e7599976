package retention

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
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

// The site loop needs of its root: entries appearing, going, written, changed (utimes
// shows as IN_ATTRIB), and the root itself going away. The events come through two
// inotify instances: changeMask says a file may be younger than the index thinks, goneMask
// that a name went. A drain deciding whether the index is current reads the first only; its
// own unlinks, one IN_DELETE each, fill the second and never stand in its way.
const (
	watchFlags = unix.IN_ONLYDIR | unix.IN_DONT_FOLLOW | unix.IN_EXCL_UNLINK
	changeMask = unix.IN_CREATE | unix.IN_MOVED_TO | unix.IN_MODIFY | unix.IN_ATTRIB |
		unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | watchFlags
	goneMask = unix.IN_DELETE | unix.IN_MOVED_FROM | watchFlags
)

// pending collects inotify events between two passes of the site loop, coalesced by name:
// the reader only takes a small lock (once per read, for the batched reader) and never
// waits for the index, so the kernel queue (or fsnotify's unbuffered channels, in the
// fallback) is drained as fast as it fills. Ops use fsnotify's Op bits either way.
type pending struct {
	mu  sync.Mutex
	ops map[string]fsnotify.Op
	// inflight holds what take handed over until the site loop has applied it (done): a
	// drain asking whether the index is current must see those names too; and an
	// overflow taken is not over until its rescan is done (inflightLost).
	inflight     map[string]fsnotify.Op
	inflightLost bool
	overflow     bool // the kernel dropped events, or we would keep too many: rescan
	rootGone     bool // the watched directory itself was removed or moved
	kick         chan struct{}

	// What quiet needs, kept countable without the lock (see rawWatch.quiet): how many
	// names in ops and inflight have a change pending (not only a going), and whether
	// events may have been lost.
	opsChanges, inflightChanges int
	changes                     atomic.Int64
	lost                        atomic.Bool
}

// isChange: the events of a name say it may be younger than the index thinks.
func isChange(op fsnotify.Op) bool { return op != 0 && !goneOp(op) }

// publish refreshes the lock-free figures; p.mu is held.
func (p *pending) publish() {
	p.changes.Store(int64(p.opsChanges + p.inflightChanges))
	p.lost.Store(p.overflow || p.inflightLost || p.rootGone)
}

// maxPending bounds the coalesced names kept between passes; past it a rescan is cheaper.
const maxPending = 1 << 16

func newPending() *pending {
	return &pending{ops: map[string]fsnotify.Op{}, kick: make(chan struct{}, 1)}
}

func (p *pending) add(name string, op fsnotify.Op) {
	p.mu.Lock()
	p.addLocked(name, op, false)
	p.mu.Unlock()
	p.signal()
}

// addLocked records one event; name "" is the root itself.
func (p *pending) addLocked(name string, op fsnotify.Op, overflow bool) {
	switch {
	case overflow:
		p.overflowLocked()
	case name == "":
		if op.Has(fsnotify.Remove) || op.Has(fsnotify.Rename) {
			p.rootGone = true
			p.publish()
		}
	case p.overflow:
	case len(p.ops) >= maxPending:
		p.overflowLocked()
	default:
		before := p.ops[name]
		p.ops[name] = before | op
		if isChange(before|op) && !isChange(before) {
			p.opsChanges++
			p.publish()
		}
	}
}

func (p *pending) overflowLocked() {
	p.overflow = true
	clear(p.ops)
	p.opsChanges = 0
	p.publish()
}

func (p *pending) setOverflow() {
	p.mu.Lock()
	p.overflowLocked()
	p.mu.Unlock()
	p.signal()
}

func (p *pending) signal() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// take hands over what was collected; done says it has been applied.
func (p *pending) take() (ops map[string]fsnotify.Op, overflow, rootGone bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ops, overflow, rootGone = p.ops, p.overflow, p.rootGone
	p.ops, p.overflow, p.rootGone = map[string]fsnotify.Op{}, false, false
	p.inflight, p.inflightLost = ops, overflow || rootGone
	p.inflightChanges, p.opsChanges = p.opsChanges, 0
	p.publish()
	return
}

func (p *pending) done() {
	p.mu.Lock()
	p.inflight, p.inflightLost, p.inflightChanges = nil, false, 0
	p.publish()
	p.mu.Unlock()
}

// goneOp: the events of a name say only that it went (and was not created again).
func goneOp(op fsnotify.Op) bool {
	return !op.Has(fsnotify.Create) && (op.Has(fsnotify.Remove) || op.Has(fsnotify.Rename))
}

// takeGone hands over the names whose events say only that they went.
func (p *pending) takeGone() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var gone []string
	for n, op := range p.ops {
		if goneOp(op) {
			gone = append(gone, n)
			delete(p.ops, n)
		}
	}
	return gone
}

// quiet reports whether no event for any of names waits to be applied, other than its
// going away (an unlink of a name already gone changes nothing). The caller flushed the
// kernel queue first; an overflow means nothing is known.
func (p *pending) quiet(names []string) bool {
	if p.overflow || p.inflightLost || p.rootGone {
		return false
	}
	for _, n := range names {
		if op, ok := p.ops[n]; ok && !goneOp(op) {
			return false
		}
		if op, ok := p.inflight[n]; ok && !goneOp(op) {
			return false
		}
	}
	return true
}

// readEvents drains an fsnotify watcher into p until the watcher closes: the fallback
// when the batched reader (rawWatch) cannot be set up.
func readEvents(w *fsnotify.Watcher, prefix string, p *pending) {
	events, errs := w.Events, w.Errors
	for events != nil || errs != nil {
		select {
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			name := ev.Name
			if name == strings.TrimSuffix(prefix, "/") {
				name = ""
			} else {
				name = strings.TrimPrefix(name, prefix)
			}
			p.add(name, ev.Op)
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				p.setOverflow()
			}
		}
	}
}

// rawWatch is an inotify watch on one directory, read in batches into a pending set.
type rawWatch struct {
	chg  int // the inotify instance for changeMask (non-blocking)
	gone int // the inotify instance for goneMask (non-blocking)
	stop int // eventfd: written by Close to end the reader
	done chan struct{}
	// goneWd is the gone instance's watch; muted says IN_DELETE is off it for now
	// (setGoneMuted, under mu).
	goneWd int
	muted  bool
	// chgWd is the change instance's watch; childReady is closed once childEvents are on
	// it (addChildEvents), lossy set if they could not be.
	chgWd      int
	childReady chan struct{}
	lossy      atomic.Bool
	p          *pending

	// mu covers a read of the change queue together with handing its events to p, so
	// that a flush that finds the queue empty knows every change read so far is in p;
	// and it keeps flush off the fd once Close has released it.
	mu     sync.Mutex
	closed bool
	fbuf   []byte // flush's read buffer (under mu)

	// passes and passed count reader passes begun and ended (see quiet); users counts
	// drain batches using the fds without mu, which Close waits out.
	passes, passed atomic.Uint64
	users          atomic.Int32
	closing        atomic.Bool
}

// newRawWatch watches dir and feeds p until Close. dirFd, when not -1, is an open fd of
// that very directory: both instances then watch the inode it holds (through its
// /proc/self/fd link), so a directory swapped at dir between the two inotify_add_watch
// calls cannot leave them watching two different directories.
func newRawWatch(dir string, dirFd int, p *pending) (*rawWatch, error) {
	target, flags := dir, uint32(0)
	if dirFd >= 0 {
		if link := fmt.Sprintf("/proc/self/fd/%d", dirFd); unix.Access(link, unix.F_OK) == nil {
			// The link is the last component, so it must be followed: IN_DONT_FOLLOW
			// would watch the link itself.
			target, flags = link, unix.IN_DONT_FOLLOW
		}
	}
	var fds []int
	fail := func(err error) (*rawWatch, error) {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, err
	}
	var wds []int
	// The change instance starts with the directory's own events only: adding a watch for
	// events on children (IN_MODIFY, IN_ATTRIB) makes the kernel flag every cached child
	// dentry, 7 ms for a directory of 100,000, and those two are added beside the first
	// listing instead (addChildEvents).
	for _, mask := range []uint32{changeMask &^ childEvents, goneMask} {
		fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
		if err != nil {
			return fail(fmt.Errorf("inotify_init1: %w", err))
		}
		fds = append(fds, fd)
		wd, err := unix.InotifyAddWatch(fd, target, mask&^flags)
		if err != nil {
			return fail(fmt.Errorf("inotify_add_watch %s: %w", dir, err))
		}
		wds = append(wds, wd)
	}
	stop, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return fail(fmt.Errorf("eventfd: %w", err))
	}
	w := &rawWatch{chg: fds[0], gone: fds[1], chgWd: wds[0], goneWd: wds[1], stop: stop, done: make(chan struct{}),
		childReady: make(chan struct{}), p: p}
	go w.addChildEvents(target, flags)
	go w.read(p)
	return w, nil
}

// childEvents are the change mask's events about children (the rest are the directory's
// own: IN_CREATE, IN_MOVED_TO, the root going away).
const childEvents = unix.IN_MODIFY | unix.IN_ATTRIB

// addChildEvents adds childEvents to the change watch and closes childReady. A scan waits
// for it (waitChildEvents) after its listing and before its first statx: a file written
// before the events were on is then stated after, and one written after leaves an event,
// so nothing is missed, and the kernel's walk over the children runs beside the listing.
// Creations are seen from the start. The answer must be the change watch itself (the
// same inode): anything else is undone and the watch counts as lossy.
func (w *rawWatch) addChildEvents(target string, flags uint32) {
	defer close(w.childReady)
	if remask(w.chg, w.chgWd, target, (childEvents|unix.IN_MASK_ADD|watchFlags)&^flags) != nil {
		w.lossy.Store(true)
	}
}

// remask changes the mask of the watch wd of the inotify instance ifd, naming its inode
// by path (inotify_add_watch on an inode already watched changes that watch). An answer
// for another watch means path led to another inode: that new watch is removed again.
func remask(ifd, wd int, path string, mask uint32) error {
	got, err := unix.InotifyAddWatch(ifd, path, mask)
	if err != nil {
		return err
	}
	if got != wd {
		unix.InotifyRmWatch(ifd, uint32(got))
		return fmt.Errorf("inotify_add_watch %s answered watch %d, not %d", path, got, wd)
	}
	return nil
}

// waitChildEvents waits until the change watch reports writes and attribute changes of
// children (or has failed to: then it is lossy, and no drain trusts the index for them).
func (w *rawWatch) waitChildEvents() { <-w.childReady }

// childEventsOn reports, without waiting, that the change watch reports writes and
// attribute changes of children.
func (w *rawWatch) childEventsOn() bool {
	select {
	case <-w.childReady:
		return !w.lossy.Load()
	default:
		return false
	}
}

// Close ends the reader and releases the fds.
func (w *rawWatch) Close() error {
	w.closing.Store(true)
	<-w.childReady // addChildEvents uses the change fd
	one := [8]byte{1}
	unix.Write(w.stop, one[:])
	<-w.done
	for w.users.Load() > 0 {
		time.Sleep(50 * time.Microsecond) // a drain batch between two jobs
	}
	w.mu.Lock()
	w.closed = true
	unix.Close(w.chg)
	unix.Close(w.gone)
	unix.Close(w.stop)
	w.mu.Unlock()
	return nil
}

// Order across the two queues. Within one queue the kernel keeps the order; across them it
// is lost, and it matters: a name unlinked and created again must never be applied as
// "gone" after its new Create. So every pass reads the change queue and then the gone
// queue, each until it is empty, and hands both to the pending set under one hold of its
// lock: an unlink that happened before a create read in this pass happened before the
// change queue was read, so it is read in this same pass (or was in an earlier one). The
// pending set ORs a name's events and lstats every name not only gone, so events of one
// pass need no order among themselves.

// flush reads whatever the kernel has queued into the pending set now, without waiting for
// the reader's next pass. It reports false when the watch is closed or cannot be read: then
// nothing is known about changes not yet seen. With no change queued (a drain's usual
// case: its own unlinks only fill the gone queue) it costs one ioctl.
func (w *rawWatch) flush() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return false
	}
	n, err := unix.IoctlGetInt(w.chg, unix.TIOCINQ) // FIONREAD: bytes queued
	if err != nil {
		return false
	}
	if n == 0 {
		return true
	}
	if w.fbuf == nil {
		w.fbuf = make([]byte, 16<<10)
	}
	_, ok := w.pass(w.fbuf)
	return ok
}

// setGoneMuted takes IN_DELETE off the gone instance's watch (mute) or puts it back,
// through dirFd, an open fd of the watched directory itself: inotify_add_watch on the
// inode already watched replaces that watch's mask. A long unthrottled drain mutes it,
// since its own unlinks would come back as one event each (a third of the drain's cost
// at 100,000 files: allocated by the kernel, read, parsed, applied under the site lock),
// and the site rescans when it unmutes, which finds what others deleted meanwhile.
// It reports whether the watch is now as asked; an answer for another inode (the
// directory is not the one watched) is undone and reported as false.
func (w *rawWatch) setGoneMuted(dirFd int, mute bool) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return false
	}
	if w.muted == mute {
		return true
	}
	mask := uint32(goneMask &^ unix.IN_DONT_FOLLOW) // the /proc/self/fd link must be followed
	if mute {
		mask &^= unix.IN_DELETE
	}
	if remask(w.gone, w.goneWd, fmt.Sprintf("/proc/self/fd/%d", dirFd), mask) != nil {
		return false
	}
	w.muted = mute
	return true
}

// acquire keeps the fds open for a caller of quiet until release; false once closing.
func (w *rawWatch) acquire() bool {
	w.users.Add(1)
	if w.closing.Load() {
		w.users.Add(-1)
		return false
	}
	return true
}

func (w *rawWatch) release() { w.users.Add(-1) }

// quiet reports, without a lock, that no change can be waiting: none queued in the kernel,
// no pass reading one, none in the pending set, nothing lost. A pass that began before the
// ioctl and has not ended shows as passes != passed; one that ended has published what it
// read. The caller holds acquire and has checked childEventsOn. When quiet says false,
// flush and look at the names.
func (w *rawWatch) quiet() bool {
	ended := w.passed.Load()
	n, err := unix.IoctlGetInt(w.chg, unix.TIOCINQ) // FIONREAD: bytes queued
	if err != nil || n != 0 || w.passes.Load() != ended {
		return false
	}
	return w.p.changes.Load() == 0 && !w.p.lost.Load()
}

// pass reads the change queue, then the gone queue, each until empty, into the pending set
// under one hold of its lock (see above); w.mu is held. It reports whether it got any
// event, and false for ok when a queue cannot be read.
func (w *rawWatch) pass(buf []byte) (got, ok bool) {
	p := w.p
	p.mu.Lock()
	defer func() {
		p.mu.Unlock()
		if got {
			p.signal()
		}
	}()
	// passes/passed bracket the change queue only: a pass busy with the drain's own
	// unlinks in the gone queue must not make quiet say "maybe".
	w.passes.Add(1)
	gotChg, ok := readInto(w.chg, buf, p)
	w.passed.Add(1)
	if !ok {
		return gotChg, false
	}
	gotGone, ok := readInto(w.gone, buf, p)
	return gotChg || gotGone, ok
}

// readInto reads fd's queue until it is empty and parses it into p (p.mu held).
func readInto(fd int, buf []byte, p *pending) (got, ok bool) {
	for {
		n, err := unix.Read(fd, buf)
		if n > 0 {
			got = true
			parseInotify(buf[:n], p.addLocked)
			continue
		}
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return got, errors.Is(err, unix.EAGAIN) || (n == 0 && err == nil)
	}
}

// read is the reader goroutine: read what is queued, hand it over, pause, and wait in
// poll only when both queues are empty.
func (w *rawWatch) read(p *pending) {
	defer close(w.done)
	buf := make([]byte, 64<<10)
	fds := []unix.PollFd{{Fd: int32(w.stop), Events: unix.POLLIN},
		{Fd: int32(w.chg), Events: unix.POLLIN}, {Fd: int32(w.gone), Events: unix.POLLIN}}
	stopOnly := fds[:1]
	for {
		w.mu.Lock()
		got, ok := w.pass(buf)
		w.mu.Unlock()
		if !ok {
			p.setOverflow() // cannot read: what we miss, a rescan finds
			return
		}
		if got {
			stopOnly[0].Revents = 0
			if k, _ := unix.Poll(stopOnly, int(inotifyBatchDelay/time.Millisecond)); k > 0 {
				return
			}
			continue
		}
		for i := range fds {
			fds[i].Revents = 0
		}
		if _, err := unix.Poll(fds, -1); err != nil && !errors.Is(err, unix.EINTR) {
			p.setOverflow()
			return
		}
		if fds[0].Revents != 0 {
			return
		}
	}
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

package jobs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// The live registry (issue 20 item 2, CONTRACT §17) is an append-only journal of JSON
// lines in [jobs] registry_dir (default /run/sandboxd, a tmpfs: jobs do not outlive a
// boot, and neither need their records), never on a watched filesystem. A registration
// is one small write() of one line, a heartbeat another; the journal is rewritten
// compactly (a temp file renamed over it) only once it has grown to four times its size
// after the last rewrite, and when sandboxd stops.
//
// No fsync: what the registry must survive is a crash of sandboxd (kill -9, OOM, a
// panic), and a write() that returned is in the page cache, which a crashed process does
// not take with it; a crash of the host takes every job with it, so nothing on disk could
// matter then (and /run is not on a disk). A write() that fails (ENOSPC on a full /run,
// EIO, the directory gone) is what "cannot be made durable" means: the registration is
// refused with 503 state_unavailable and nothing is moved into a cgroup.
//
// Records: {"op":"boot","boot_id":...,"v":1} first; {"op":"put","job":{...}} for a job as
// it is now (registered, ending, ended); {"op":"hb","id":...,"lease_boot":N,"heartbeats":N}
// for a heartbeat; {"op":"forget","id":...} when an ended job is dropped;
// {"op":"lease","lease":{...}} for a shared lease as it is now (one record renews all its
// jobs) and {"op":"lease_forget","id":NAME} when it is dropped. A reader ignores
// ops and fields it does not know, so later versions can add both (owners, leases,
// clone3-spawned jobs).

const (
	journalName    = "jobs.journal"
	lockName       = "jobs.lock"
	journalVersion = 1
	// minCompact is the size below which the journal is never rewritten.
	minCompact = 64 << 10
)

type record struct {
	Op        string `json:"op"`
	BootID    string `json:"boot_id,omitempty"`
	Version   int    `json:"v,omitempty"`
	Job       *job   `json:"job,omitempty"`
	ID        string `json:"id,omitempty"`
	LeaseBoot int64  `json:"lease_boot,omitempty"`
	Beats     int64  `json:"heartbeats,omitempty"`
	Lease     *lease `json:"lease,omitempty"`
}

// journal is the open registry file. Its methods are called under Manager.mu.
type journal struct {
	dir  string
	lock *os.File // flock'd: one daemon per registry
	f    *os.File // O_APPEND
	size int64    // bytes in f now
	base int64    // bytes right after the last rewrite
	// Written counts every byte written since open (appends and rewrites), for the status
	// and the benchmark.
	written int64
	broken  error // the journal could not be reopened after a rewrite: nothing appends
}

// errHeld is the registry's lock held by another process: the sandboxd before this one,
// still stopping (a handover), or another daemon given the same registry_dir.
var errHeld = errors.New("held by another sandboxd")

// openJournal opens (creating) the registry in dir and returns the records it holds.
func openJournal(dir string) (*journal, []record, int, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, 0, fmt.Errorf("create registry dir %s: %w", dir, err)
	}
	lk, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("open %s: %w", filepath.Join(dir, lockName), err)
	}
	if err := unix.Flock(int(lk.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		lk.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, nil, 0, fmt.Errorf("registry %s: %w (flock on %s)", dir, errHeld, lockName)
		}
		return nil, nil, 0, fmt.Errorf("flock %s: %w", filepath.Join(dir, lockName), err)
	}
	path := filepath.Join(dir, journalName)
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		lk.Close()
		return nil, nil, 0, fmt.Errorf("read %s: %w", path, err)
	}
	recs, bad := parseJournal(b)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		lk.Close()
		return nil, nil, 0, fmt.Errorf("open %s: %w", path, err)
	}
	jr := &journal{dir: dir, lock: lk, f: f, size: int64(len(b)), base: int64(len(b))}
	if n := lastGoodEnd(b); n < len(b) {
		// A torn last line (a crash in the middle of a write): cut it off, so the next
		// record starts on a line of its own.
		f.Truncate(int64(n))
		jr.size = int64(n)
	}
	return jr, recs, bad, nil
}

// parseJournal reads the records; bad counts lines that did not parse (a torn last line
// from a crash mid-write among them).
func parseJournal(b []byte) ([]record, int) {
	var out []record
	bad := 0
	for _, line := range bytes.Split(b, []byte{'\n'}) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var r record
		if err := json.Unmarshal(line, &r); err != nil || r.Op == "" {
			bad++
			continue
		}
		out = append(out, r)
	}
	return out, bad
}

// lastGoodEnd is the length of b up to its last newline.
func lastGoodEnd(b []byte) int {
	return bytes.LastIndexByte(b, '\n') + 1
}

func encode(recs []record) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for i := range recs {
		if err := enc.Encode(&recs[i]); err != nil {
			return nil, err
		}
	}
	return buf.Bytes(), nil
}

// append writes recs as one write(). A short or failed write is cut back off, so the
// journal never keeps half a record that the next one would be glued to.
func (jr *journal) append(recs ...record) error {
	if jr.broken != nil {
		return jr.broken
	}
	b, err := encode(recs)
	if err != nil {
		return err
	}
	n, err := jr.f.Write(b)
	jr.written += int64(n)
	if err != nil {
		if n > 0 {
			jr.f.Truncate(jr.size)
		}
		return fmt.Errorf("append to %s: %w", filepath.Join(jr.dir, journalName), err)
	}
	jr.size += int64(n)
	return nil
}

// due says whether the journal has grown enough to be rewritten.
func (jr *journal) due() bool { return jr.size > max(minCompact, 4*jr.base) }

// rewrite replaces the journal by recs (a boot record and one put per job): a temp file
// in the same directory, renamed over it. On failure the old journal stays in use.
func (jr *journal) rewrite(recs []record) error {
	b, err := encode(recs)
	if err != nil {
		return err
	}
	tmp := filepath.Join(jr.dir, journalName+".new")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("rewrite registry: %w", err)
	}
	n, err := f.Write(b)
	jr.written += int64(n)
	f.Close()
	path := filepath.Join(jr.dir, journalName)
	if err == nil {
		err = os.Rename(tmp, path) // by path: sandboxd's own files in its flock'd registry dir
	}
	if err != nil {
		os.Remove(tmp) // by path: sandboxd's own temp file in its flock'd registry dir
		return fmt.Errorf("rewrite registry: %w", err)
	}
	// The renamed file is the journal now; appends go to its end.
	nf, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		jr.broken = fmt.Errorf("reopen registry %s after a rewrite: %w", path, err)
		return jr.broken
	}
	jr.f.Close()
	jr.f, jr.size, jr.base = nf, int64(n), int64(n)
	return nil
}

func (jr *journal) close() {
	jr.f.Close()
	jr.lock.Close()
}

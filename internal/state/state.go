// Package state owns sandboxd's state directory: small JSON documents (cooldowns, first
// seen pids, the reserve) written atomically — temp file in the same directory, fsync,
// rename, fsync of the directory — and kept in memory when they cannot be written, such
// as on a full disk or a read-only state dir. Status shows whether state is persistent.
package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/sandboxd/sandboxd/internal/safefs"
)

// Store keeps named JSON documents in a directory, with an in-memory copy of each that
// is authoritative while the disk refuses writes.
type Store struct {
	dir string

	mu      sync.Mutex        // guards the fields below
	mem     map[string][]byte // last value of every document saved or loaded
	lastErr error             // the last write failure, nil once a write succeeds again
	onWrite func(path string, bytes int64)
	onFlip  func(err error)
}

// OnPersistChange sets f to be called (outside the store's lock) whenever a write's
// outcome flips persistence: with the error when writes start failing, with nil when one
// succeeds again. The daemon raises and clears StateNotPersistent with it.
func (s *Store) OnPersistChange(f func(err error)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onFlip = f
}

// OnWrite sets f to be told, before each document is written, where and about how many
// bytes (the document rounded up to a 4 KiB block): the daemon tells the pressure watcher,
// so that its own state never reads as growth.
func (s *Store) OnWrite(f func(path string, bytes int64)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onWrite = f
}

// Open returns a store on dir, creating it (mode 0700) when it can. A directory that
// cannot be created is not an error: the store runs memory-only and Err says why.
func Open(dir string) *Store {
	s := &Store{dir: dir, mem: map[string][]byte{}}
	if dir == "" {
		s.lastErr = errors.New("no state directory configured")
		return s
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		s.lastErr = fmt.Errorf("create state dir %s: %w", dir, err)
		return s
	}
	if r, err := safefs.OpenRoot(dir); err != nil {
		s.lastErr = fmt.Errorf("state dir: %w", err)
	} else {
		r.Close()
	}
	return s
}

// Dir is the state directory.
func (s *Store) Dir() string { return s.dir }

// Err is the last write failure, or nil while state is persistent.
func (s *Store) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastErr
}

func validName(name string) error {
	if name == "" || strings.ContainsAny(name, "/\x00") || name == "." || name == ".." || strings.HasPrefix(name, ".tmp-") {
		return fmt.Errorf("invalid state document name %q", name)
	}
	return nil
}

// Load decodes the document name into v. A document that was never written leaves v
// untouched and returns nil; a corrupt one returns an error naming the file.
func (s *Store) Load(name string, v any) error {
	if err := validName(name); err != nil {
		return err
	}
	s.mu.Lock()
	b, ok := s.mem[name]
	s.mu.Unlock()
	if !ok && s.dir != "" {
		data, err := s.read(name)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil
		case err != nil:
			return fmt.Errorf("read state %s: %w", filepath.Join(s.dir, name), err)
		}
		b = data
		s.mu.Lock()
		s.mem[name] = b
		s.mu.Unlock()
	}
	if b == nil {
		return nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("decode state %s: %w", filepath.Join(s.dir, name), err)
	}
	return nil
}

// Save encodes v as the document name. The value is always kept in memory; the returned
// error says only that it could not reach the disk (and Err keeps saying so until a later
// write succeeds).
func (s *Store) Save(name string, v any) error {
	if err := validName(name); err != nil {
		return err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode state %s: %w", name, err)
	}
	s.mu.Lock()
	s.mem[name] = b
	s.mu.Unlock()
	werr := s.write(name, b)
	s.mu.Lock()
	flipped := (werr == nil) != (s.lastErr == nil)
	s.lastErr = werr
	f := s.onFlip
	s.mu.Unlock()
	if flipped && f != nil {
		f(werr)
	}
	return werr
}

// read reads a document beneath the state dir's safely walked fd (safefs): a parent
// swapped for a symlink is refused, not followed.
func (s *Store) read(name string) ([]byte, error) {
	r, err := safefs.OpenRoot(s.dir)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return r.ReadFile(name)
}

var tmpSeq atomic.Uint64

// write replaces the document name atomically, every step beneath the state dir's fd as
// safefs walked it from "/": the temp file is created with O_EXCL|O_NOFOLLOW and renamed
// within that directory, so a swapped parent cannot redirect the write or the rename.
func (s *Store) write(name string, b []byte) error {
	if s.dir == "" {
		return errors.New("no state directory configured")
	}
	path := filepath.Join(s.dir, name)
	r, err := safefs.OpenRoot(s.dir)
	if err != nil {
		return fmt.Errorf("write state %s: %w", path, err)
	}
	defer r.Close()
	s.mu.Lock()
	onWrite := s.onWrite
	s.mu.Unlock()
	if onWrite != nil {
		onWrite(path, int64(len(b)+4095)/4096*4096)
	}
	tmp := fmt.Sprintf(".tmp-%s-%d-%d", name, os.Getpid(), tmpSeq.Add(1))
	f, err := r.CreateFile(tmp, 0o600)
	if err != nil {
		return fmt.Errorf("write state %s: %w", path, err)
	}
	fail := func(step string, err error) error {
		f.Close()
		r.RemoveFile(tmp)
		return fmt.Errorf("write state %s: %s: %w", path, step, err)
	}
	if _, err := f.Write(b); err != nil {
		return fail("write", err)
	}
	if err := f.Sync(); err != nil {
		return fail("fsync", err)
	}
	if err := f.Close(); err != nil {
		r.RemoveFile(tmp)
		return fmt.Errorf("write state %s: close: %w", path, err)
	}
	if err := r.ReplaceFile(tmp, name); err != nil {
		r.RemoveFile(tmp)
		return fmt.Errorf("write state %s: %w", path, err)
	}
	r.Sync()
	return nil
}

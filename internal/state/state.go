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
)

// Store keeps named JSON documents in a directory, with an in-memory copy of each that
// is authoritative while the disk refuses writes.
type Store struct {
	dir string

	mu      sync.Mutex        // guards the fields below
	mem     map[string][]byte // last value of every document saved or loaded
	lastErr error             // the last write failure, nil once a write succeeds again
	onWrite func(path string, bytes int64)
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
		data, err := os.ReadFile(filepath.Join(s.dir, name))
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
	s.lastErr = werr
	s.mu.Unlock()
	return werr
}

func (s *Store) write(name string, b []byte) error {
	if s.dir == "" {
		return errors.New("no state directory configured")
	}
	s.mu.Lock()
	onWrite := s.onWrite
	s.mu.Unlock()
	if onWrite != nil {
		onWrite(filepath.Join(s.dir, name), int64(len(b)+4095)/4096*4096)
	}
	f, err := os.CreateTemp(s.dir, ".tmp-"+name+"-")
	if err != nil {
		return fmt.Errorf("write state %s: %w", filepath.Join(s.dir, name), err)
	}
	tmp := f.Name()
	fail := func(step string, err error) error {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("write state %s: %s: %w", filepath.Join(s.dir, name), step, err)
	}
	if _, err := f.Write(b); err != nil {
		return fail("write", err)
	}
	if err := f.Sync(); err != nil {
		return fail("fsync", err)
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write state %s: close: %w", filepath.Join(s.dir, name), err)
	}
	if err := os.Rename(tmp, filepath.Join(s.dir, name)); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write state %s: rename: %w", filepath.Join(s.dir, name), err)
	}
	if d, err := os.Open(s.dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

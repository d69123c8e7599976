package state

import (
	"os"
	"path/filepath"
	"testing"
)

// TestOnWriteIsToldBeforeEachWrite: the daemon discounts its own state documents from the
// growth rate through OnWrite, so every write must declare itself first, with the path
// and the size rounded up to a 4 KiB block (a state document written undeclared read as
// growth: a fresh start on tmpfs showed "filling at 124 KiB/s").
func TestOnWriteIsToldBeforeEachWrite(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	s := Open(dir)
	type call struct {
		path    string
		bytes   int64
		existed bool
	}
	var calls []call
	s.OnWrite(func(path string, n int64) {
		_, err := os.Stat(path)
		calls = append(calls, call{path, n, err == nil})
	})
	if err := s.Save("doc", map[string]string{"k": "v"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Save("doc", map[string]string{"k": "w"}); err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(dir, "doc")
	if len(calls) != 2 {
		t.Fatalf("OnWrite told %d times for 2 writes: %+v", len(calls), calls)
	}
	if calls[0] != (call{want, 4096, false}) || calls[1] != (call{want, 4096, true}) {
		t.Fatalf("OnWrite calls %+v; want %s, 4096 bytes, before the first write (the file absent) and again", calls, want)
	}
}

package state

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

type doc struct {
	N    int               `json:"n"`
	Seen map[string]uint64 `json:"seen"`
}

func TestSaveLoadRoundTripAndAtomicity(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	s := Open(dir)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	var empty doc
	if err := s.Load("cooldown", &empty); err != nil || empty.N != 0 {
		t.Fatalf("missing document: %v %+v", err, empty)
	}
	if err := s.Save("cooldown", doc{N: 7, Seen: map[string]uint64{"a": 1}}); err != nil {
		t.Fatal(err)
	}
	// A new store on the same dir reads what the first wrote (a restart).
	var got doc
	if err := Open(dir).Load("cooldown", &got); err != nil || got.N != 7 || got.Seen["a"] != 1 {
		t.Fatalf("reload: %v %+v", err, got)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".tmp-") {
			t.Errorf("temp file %s left behind", e.Name())
		}
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o700 {
		t.Errorf("state dir mode %v, want 0700", fi.Mode().Perm())
	}
}

func TestCorruptDocumentNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "x"), []byte("{not json"), 0o600)
	var d doc
	if err := Open(dir).Load("x", &d); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "x")) {
		t.Fatalf("corrupt document: %v", err)
	}
}

func TestInvalidNames(t *testing.T) {
	s := Open(t.TempDir())
	for _, n := range []string{"", "a/b", "..", ".", ".tmp-x", "nul\x00"} {
		if err := s.Save(n, 1); err == nil {
			t.Errorf("Save(%q) accepted", n)
		}
	}
}

// TestFullDiskKeepsStateInMemory: on a 100% full filesystem a write fails, the value is
// kept in memory and served by Load, Err says why, and the old file is intact; once
// space returns a write succeeds and Err clears.
func TestFullDiskKeepsStateInMemory(t *testing.T) {
	mnt := testenv.Tmpfs(t, 1<<20, 0)
	s := Open(filepath.Join(mnt, "state"))
	if err := s.Save("doc", doc{N: 1}); err != nil {
		t.Fatal(err)
	}
	if err := testenv.Fill(filepath.Join(mnt, "fill"), 1<<30); err == nil {
		t.Fatal("fill did not reach ENOSPC")
	}
	big := doc{N: 2, Seen: map[string]uint64{}}
	for i := 0; i < 20000; i++ {
		big.Seen[strings.Repeat("k", 20)+string(rune('a'+i%26))+string(rune(i))] = uint64(i)
	}
	if err := s.Save("doc", big); err == nil {
		t.Fatal("a write to a full disk reported success")
	}
	if s.Err() == nil || !strings.Contains(s.Err().Error(), "no space") {
		t.Fatalf("Err = %v, want the ENOSPC", s.Err())
	}
	var mem doc
	if err := s.Load("doc", &mem); err != nil || mem.N != 2 {
		t.Fatalf("in-memory value not served: %v %+v", err, mem.N)
	}
	var disk doc
	if err := Open(filepath.Join(mnt, "state")).Load("doc", &disk); err != nil || disk.N != 1 {
		t.Fatalf("the file on disk was damaged: %v %+v", err, disk)
	}
	os.Remove(filepath.Join(mnt, "fill"))
	if err := s.Save("doc", doc{N: 3}); err != nil || s.Err() != nil {
		t.Fatalf("write after space returned: %v / %v", err, s.Err())
	}
}

func TestUnwritableDirIsMemoryOnly(t *testing.T) {
	testenv.RequireRoot(t)
	mnt := testenv.Tmpfs(t, 1<<20, 0)
	os.WriteFile(filepath.Join(mnt, "f"), nil, 0o644) // a file where the dir's parent should be
	s2 := Open(filepath.Join(mnt, "f", "state"))
	if s2.Err() == nil {
		t.Fatal("an impossible state dir reported no error")
	}
	if err := s2.Save("x", 1); err == nil {
		t.Fatal("save into an impossible dir reported success")
	}
	var v int
	if err := s2.Load("x", &v); err != nil || v != 1 {
		t.Fatalf("memory-only store lost the value: %v %d", err, v)
	}
}

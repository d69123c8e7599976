package state

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The state dir's parent swapped for a symlink while the daemon runs: a save writes
// nothing behind the link (it stays in memory and Err says why), and a fresh store on the
// path does not read the planted document.
func TestStateDirParentSwappedForALink(t *testing.T) {
	base := t.TempDir()
	parent := filepath.Join(base, "lib")
	dir := filepath.Join(parent, "sandboxd")
	s := Open(dir)
	if err := s.Save("cooldown", doc{N: 1}); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(base, "victim")
	os.MkdirAll(filepath.Join(victim, "sandboxd"), 0o700)
	planted := filepath.Join(victim, "sandboxd", "cooldown")
	os.WriteFile(planted, []byte(`{"n": 99}`), 0o600)
	os.Rename(parent, parent+".old")
	os.Symlink(victim, parent)

	err := s.Save("cooldown", doc{N: 2})
	if err == nil || !strings.Contains(err.Error(), "is a symlink") || s.Err() == nil {
		t.Fatalf("Save through the link = %v (Err %v), want a refusal naming the link", err, s.Err())
	}
	if b, _ := os.ReadFile(planted); string(b) != `{"n": 99}` {
		t.Fatalf("the file behind the link was overwritten: %s", b)
	}
	if es, _ := os.ReadDir(filepath.Join(victim, "sandboxd")); len(es) != 1 {
		t.Fatalf("something was written behind the link: %v", es)
	}
	var d doc
	if err := s.Load("cooldown", &d); err != nil || d.N != 2 {
		t.Fatalf("memory copy: %v %+v", err, d)
	}
	fresh := Open(dir)
	if fresh.Err() == nil || !strings.Contains(fresh.Err().Error(), "is a symlink") {
		t.Fatalf("a fresh store on the swapped path: Err %v", fresh.Err())
	}
	var f doc
	if err := fresh.Load("cooldown", &f); f.N == 99 {
		t.Fatalf("the planted document was read (%v)", err)
	}
}

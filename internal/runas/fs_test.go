package runas

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// AsFS acts with the given user's rights, as the kernel judges them: no write into a
// root-owned 0755 directory, and a file made in a world-writable one belongs to the user;
// meanwhile, and after, every other goroutine still acts as root.
func TestAsFSActsAsTheUserOnly(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	os.Chmod(filepath.Dir(dir), 0o755) // searchable by 65534
	os.Chmod(dir, 0o755)
	closed := filepath.Join(dir, "closed")
	open := filepath.Join(dir, "open")
	os.Mkdir(closed, 0o755)
	os.Mkdir(open, 0o777)
	os.Chmod(open, 0o777)
	nobody := &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}

	err := AsFS(nobody, func() error { return os.WriteFile(filepath.Join(closed, "x"), nil, 0o644) })
	if !errors.Is(err, os.ErrPermission) {
		t.Fatalf("write into a root-owned 0755 dir as 65534: %v, want EACCES", err)
	}
	if _, err := os.Lstat(filepath.Join(closed, "x")); !os.IsNotExist(err) {
		t.Fatalf("the file was created: %v", err)
	}
	// Many goroutines act as root while (and after) others act as 65534.
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			if err := AsFS(nobody, func() error {
				return os.WriteFile(filepath.Join(open, "n"+string(rune('a'+i%26))+string(rune('a'+i/26))), nil, 0o644)
			}); err != nil {
				t.Error(err)
			}
		}()
		go func() {
			defer wg.Done()
			if err := os.WriteFile(filepath.Join(closed, "r"+string(rune('a'+i%26))+string(rune('a'+i/26))), nil, 0o644); err != nil {
				t.Errorf("root's own write failed: %v", err)
			}
		}()
	}
	wg.Wait()
	ents, _ := os.ReadDir(open)
	for _, e := range ents {
		fi, _ := e.Info()
		if uid := fi.Sys().(*syscall.Stat_t).Uid; uid != 65534 {
			t.Errorf("%s made as 65534 is owned by uid %d", e.Name(), uid)
		}
	}
	ents, _ = os.ReadDir(closed)
	if len(ents) != 50 {
		t.Errorf("root's goroutines made %d files, want 50", len(ents))
	}
	for _, e := range ents {
		fi, _ := e.Info()
		if uid := fi.Sys().(*syscall.Stat_t).Uid; uid != 0 {
			t.Errorf("%s made as root is owned by uid %d: a thread kept 65534's credentials", e.Name(), uid)
		}
	}
	if err := AsFS(nil, func() error { return os.WriteFile(filepath.Join(closed, "self"), nil, 0o644) }); err != nil {
		t.Errorf("AsFS(nil) is the daemon itself: %v", err)
	}
}

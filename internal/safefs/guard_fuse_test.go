package safefs

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/fusetest"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// A protected path on a FUSE mount whose server hangs: the mount's root is still located
// (device and inode come from the inode, AT_STATX_DONT_SYNC), and a path beneath it, whose
// lookup blocks, makes the check answer "cannot be checked" instead of stalling; the
// next check shares the one outstanding lookup.
func TestGuardsOnAHungMount(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	mnt := filepath.Join(dir, "mnt")
	os.Mkdir(mnt, 0o755)
	srv := fusetest.Start(t, mnt, fusetest.Options{})
	os.Mkdir(filepath.Join(srv.Backing, "keep"), 0o755)
	os.Mkdir(filepath.Join(srv.Backing, "later"), 0o755)
	os.Mkdir(filepath.Join(dir, "site"), 0o755)
	r := openRoot(t, filepath.Join(dir, "site"))
	healthy := []Guarded{{Path: mnt, What: "the mount", Inside: true}, {Path: filepath.Join(mnt, "keep"), What: "keep", Inside: true}}
	if got := r.CheckGuards(healthy); got != "" {
		t.Fatalf("CheckGuards on a healthy mount = %q", got)
	}
	srv.Hang()
	// The server takes the signal in its own time: until then a lookup of a name that
	// does not exist answers ENOENT (nothing to guard); once hung it does not return.
	for i := 0; ; i++ {
		got := r.CheckGuards([]Guarded{{Path: filepath.Join(mnt, fmt.Sprintf("probe-%d", i)), What: "probe", Inside: true}})
		if got != "" {
			break
		}
		if i == 200 {
			t.Fatal("the server never hung")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := r.CheckGuards([]Guarded{{Path: mnt, What: "the mount", Inside: true}}); got != "" {
		t.Errorf("CheckGuards(the hung mount's root) = %q, want it located from the inode", got)
	}
	later := []Guarded{{Path: filepath.Join(mnt, "later"), What: "later", Inside: true}}
	for i := range 2 {
		if got := r.CheckGuards(later); !strings.Contains(got, "cannot be checked against later") || !strings.Contains(got, "has not returned") {
			t.Fatalf("check %d beneath the hung mount = %q, want a refusal that says the lookup hangs", i, got)
		}
	}
}

package jobs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/safefs"
)

// Why the jobs' rmdirs may go by path (issue 9). sandboxd's only deletions here are
// rmdir(2)s of cgroups below the cgroup root: an rmdir removes nothing but an empty
// directory (on cgroup2, a cgroup without processes or children), and below the cgroup2
// mount no component can be swapped: cgroup2 has no rename (only v1 has one) and no
// symlinks, whoever owns a delegated cgroup (TestCgroup2HasNoLinksNorRenames). What is
// left is the way from "/" to the root, which checkRootPath walks once at start with
// safefs: no symlink in any component, no ancestor another user could swap.

// checkRootPath opens the deepest existing directory of the cgroup root (it may not
// exist yet) with safefs's walk from "/" and returns the refusal, if any. A directory
// sandboxd is still to create below it will have it as an ancestor, so then it must also
// be root's or sandboxd's user's and not writable by others without the sticky bit.
func checkRootPath(root string) error {
	for d := root; ; d = filepath.Dir(d) {
		r, err := safefs.OpenRoot(d)
		if err == nil {
			problem := ""
			if d != root {
				problem = r.CheckOwner(uint32(os.Geteuid()))
			}
			r.Close()
			if problem != "" {
				return fmt.Errorf("[jobs] cgroup root %s: %s: another user could swap what sandboxd creates and removes below it", root, problem)
			}
			return nil
		}
		if !errors.Is(err, unix.ENOENT) || d == "/" {
			return fmt.Errorf("[jobs] cgroup root %s: %w", root, err)
		}
	}
}

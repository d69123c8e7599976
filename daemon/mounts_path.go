package daemon

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/internal/safefs"
)

// kernelTrees are the kernel's own trees: nothing beneath them is a place for a session's
// mount or a link into one (/proc/self/root is "/", /proc/<pid>/cwd anything).
var kernelTrees = []string{"/proc", "/sys"}

// checkRegisteredPath applies the rules for a registered mount's path (link false) or a
// link's path (link true) to p, an absolute clean path, as the filesystem resolves it:
// walked from "/" without following a symlink (a path reached through one is refused,
// naming it; a link's own last component is the symlink sandboxd keeps, so only its
// directory is walked), not under /proc or /sys or on a kernel filesystem mounted
// elsewhere, not "/" (also not a directory that is "/" under another name, a bind mount
// of it), neither a protected path nor a parent of one.
func checkRegisteredPath(p string, link bool, cfg *config.Config) error {
	what := "a registered mount"
	if link {
		what = "a link"
	}
	if p == "/" {
		return fmt.Errorf("the root directory cannot be %s", what)
	}
	for _, k := range kernelTrees {
		if p == k || strings.HasPrefix(p, k+"/") {
			return fmt.Errorf("%q lies in the kernel's %s tree: it cannot be %s", p, k, what)
		}
	}
	walked := p
	if link {
		walked = path.Dir(p)
	}
	pw, err := safefs.WalkPath(walked)
	var unsafe *safefs.UnsafeRootError
	switch {
	case errors.As(err, &unsafe):
		return fmt.Errorf("%q is reached through a symlink: %s %s", p, unsafe.Component, unsafe.Reason)
	case err != nil:
		return fmt.Errorf("%q cannot be resolved: %w", p, err)
	}
	if k := pw.KernelFS(); k != "" {
		return fmt.Errorf("%q lies on a %s (%s): it cannot be %s", p, k, pw.Deepest, what)
	}
	if !link && pw.Exists && pw.ID != (safefs.ID{}) && pw.ID == safefs.RootID() {
		return fmt.Errorf("%q is the root directory under another name (a bind mount of /): it cannot be %s", p, what)
	}
	for i, pr := range cfg.Reclaim.Protect {
		pr = path.Clean(pr)
		if p == pr || strings.HasPrefix(pr, p+"/") {
			return fmt.Errorf("%q is or contains the protected path %q (reclaim.protect[%d])", p, pr, i)
		}
	}
	return nil
}

// Bounds of a credential's expiry: an instant before the Unix epoch or after the year
// 9999 is a runner's bug (a zero time, seconds read as milliseconds), not a credential,
// and would read as a lifetime past what a duration can hold.
var (
	minExpiry = time.Unix(0, 0).UTC()
	maxExpiry = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
)

// checkExpiry refuses an absurd credential expiry with 400 naming the field.
func checkExpiry(field string, t time.Time) error {
	if t.Before(minExpiry) || !t.Before(maxExpiry) {
		return api.NewProblem(api.CodeBadRequest, "field %q: %s is not a credential's expiry: want a time between %s and the end of the year 9999",
			field, t.UTC().Format(time.RFC3339), minExpiry.Format(time.RFC3339))
	}
	return nil
}

package reclaim

import (
	"errors"
	"strings"

	"github.com/sandboxd/sandboxd/api"
)

// ErrUnavailable says no filesystem a call covers could be measured: every statfs
// failed for a reason other than the deadline (EIO, ENOENT, ESTALE, ENOTCONN of a dead
// FUSE server). Nothing is known, so there is no verdict, nothing is deleted and nothing
// is cached; the daemon answers filesystem_unavailable.
var ErrUnavailable = errors.New("no watched filesystem could be measured")

// UnavailableError is ErrUnavailable with the filesystems that failed: their last known
// figures with Error, Errno and ErrorSince set.
type UnavailableError struct {
	Filesystems []api.Filesystem
}

func (e *UnavailableError) Error() string { return UnmeasuredClause(e.Filesystems) }

func (e *UnavailableError) Unwrap() error { return ErrUnavailable }

// UnmeasuredClause names filesystems that could not be measured, for a detail line.
func UnmeasuredClause(fss []api.Filesystem) string {
	parts := make([]string, 0, len(fss))
	for _, f := range fss {
		parts = append(parts, f.UnavailableDetail())
	}
	return "not measured, so no verdict for it: " + strings.Join(parts, "; ")
}

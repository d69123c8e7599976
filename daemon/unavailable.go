package daemon

import (
	"strings"

	"github.com/sandboxd/sandboxd/api"
)

// unavailableProblem is the answer of a call whose filesystem cannot be measured: its
// statfs fails (EIO, ENOENT, ESTALE, ENOTCONN of a dead FUSE server). Not a bug, so
// never `internal`; not a deadline, so not `busy`: filesystem_unavailable (503, exit 75),
// naming the path, the errno, since when and the last good sample (issue 10).
func unavailableProblem(fss []api.Filesystem, notes []string) *api.Problem {
	var parts []string
	for _, fs := range fss {
		parts = append(parts, fs.UnavailableDetail())
	}
	parts = append(parts, notes...)
	parts = append(parts, "no verdict about its space, so nothing was reclaimed: fix or remove the filesystem, or stop watching it ([[filesystem]] path)")
	p := api.NewProblem(api.CodeFilesystemUnavailable, "%s", strings.Join(parts, "; "))
	if len(fss) > 0 {
		fs := fss[0]
		p.Filesystem = &fs
	}
	return p
}

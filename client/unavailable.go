package client

import (
	"errors"

	"github.com/sandboxd/sandboxd/api"
)

// FilesystemUnavailable reports whether err is the daemon's filesystem_unavailable
// refusal (503, CLI exit 75): a watched filesystem the call covers cannot be measured —
// its statfs fails (EIO, ENOENT, ESTALE, ENOTCONN of a FUSE server that died) — so there
// is no verdict about its space and nothing was reclaimed. fs is the filesystem as the
// daemon last knew it (Error, Errno, ErrorSince; its figures the last good sample's,
// SampledAt zero when there was none), nil when the answer carried none. It is a state
// of the machine, not of the call: retrying helps only once the filesystem answers again.
func FilesystemUnavailable(err error) (fs *api.Filesystem, ok bool) {
	var pe *ProblemError
	if !errors.As(err, &pe) || pe.Code() != api.CodeFilesystemUnavailable {
		return nil, false
	}
	return pe.Problem.Filesystem, true
}

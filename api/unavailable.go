package api

import (
	"fmt"
	"time"
)

// Unavailable reports whether the filesystem's last statfs failed or does not answer:
// its figures, if any, are the last good sample's, not what is on disk now.
func (fs Filesystem) Unavailable() bool { return fs.Error != "" || fs.Stale }

// UnavailableDetail is the fingerprint of a filesystem that cannot be measured
// (filesystem_unavailable, the FilesystemUnavailable condition): its path, what failed
// with the errno, since when, and the last good sample if there is one.
func (fs Filesystem) UnavailableDetail() string {
	s := fs.Path + " cannot be measured"
	switch {
	case fs.Error != "":
		s += ": " + fs.Error
		if fs.Errno != "" {
			s += " (" + fs.Errno + ")"
		}
	case fs.Stale:
		s += ": statfs does not answer (hung)"
	}
	if fs.ErrorSince != nil {
		s += ", failing since " + fs.ErrorSince.UTC().Format(time.RFC3339)
	}
	if fs.SampledAt.IsZero() {
		return s + "; no good sample of it yet" + SizedBy(fs.SizeSetting)
	}
	last := fs
	last.Stale, last.SizeSetting = false, ""
	return fmt.Sprintf("%s; last good sample at %s: %s", s, fs.SampledAt.UTC().Format(time.RFC3339), last.Fingerprint()) + SizedBy(fs.SizeSetting)
}

package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/safefs"
)

// runTextfile writes sandboxd's own series to [metrics] textfile every
// textfile_interval, for node_exporter's textfile collector, until ctx ends. It reads
// the config each round, so a reload that changes the path or the interval takes effect
// at the next round; the file of a path no longer configured is removed, or it would
// report frozen values for ever. A failed write (a full disk, a missing directory)
// leaves the last complete file in place: node_textfile_mtime_seconds then shows its
// age, which is what the stale-textfile alert watches. The file stays when sandboxd
// stops, for the same reason: a stopped sandboxd must look stale, not vanish.
func (d *Daemon) runTextfile(ctx context.Context) {
	var written string // the path of the last successful write
	var failing error  // the last failure, logged once until a write succeeds again
	for {
		m := d.config().Metrics
		if written != "" && written != m.Textfile {
			if err := removeTextfile(written); err != nil && !errors.Is(err, unix.ENOENT) {
				d.logger.Warn("metrics textfile: cannot remove the file of the old path", "path", written, "err", err)
			}
			written = ""
		}
		if m.Textfile != "" {
			ok, err := writeTextfile(m.Textfile, d.metrics.reg)
			switch {
			case err == nil && failing != nil:
				d.logger.Info("metrics textfile written again", "path", m.Textfile)
				failing = nil
			case err != nil && (failing == nil || failing.Error() != err.Error()):
				if ok {
					d.logger.Warn("metrics textfile written without the series that failed", "path", m.Textfile, "err", err)
				} else {
					d.logger.Warn("metrics textfile not written; the last complete file stays", "path", m.Textfile, "err", err)
				}
				failing = err
			}
			if ok {
				written = m.Textfile
			}
		}
		t := time.NewTimer(m.TextfileInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// writeTextfile renders g in the text exposition format and replaces path with it
// atomically: a temporary file in the same directory (node_exporter reads only *.prom,
// so it never sees the half-written one), fsync, mode 0644 (node_exporter runs as its
// own user), rename. On any error the temporary file is removed and path is untouched.
// Every step works beneath the directory's fd as safefs walked it from "/" (issue 9):
// a directory reached through a symlink is refused with the reason, so the rename can
// never replace a file somewhere else, nor through an ancestor anyone may write. An
// ancestor owned by one other user is allowed (safefs.OpenParentToWrite says why):
// Debian's textfile directory lives in /var/lib/prometheus, owned by the prometheus user. A collector that fails costs only
// its own series, as on /metrics (ContinueOnError): ok reports whether the file was
// replaced, err what went wrong either way.
func writeTextfile(path string, g prometheus.Gatherer) (ok bool, err error) {
	mfs, gatherErr := g.Gather()
	if gatherErr != nil && len(mfs) == 0 {
		return false, fmt.Errorf("gather: %w", gatherErr)
	}
	if err := replaceTextfile(path, mfs); err != nil {
		return false, err
	}
	if gatherErr != nil {
		return true, fmt.Errorf("gather: %w", gatherErr)
	}
	return true, nil
}

func replaceTextfile(path string, mfs []*dto.MetricFamily) (err error) {
	var buf bytes.Buffer
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&buf, mf); err != nil {
			return fmt.Errorf("encode %s: %w", mf.GetName(), err)
		}
	}
	dir, base, err := safefs.OpenParentToWrite(path)
	if err != nil {
		return fmt.Errorf("textfile directory: %w", err)
	}
	defer dir.Close()
	tmpName := fmt.Sprintf(".%s.%d-%d.tmp", base, os.Getpid(), textfileSeq.Add(1))
	tmp, err := dir.CreateFile(tmpName, 0o600) // O_EXCL|O_NOFOLLOW
	if err != nil {
		return fmt.Errorf("create a temporary file: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			dir.RemoveFile(tmpName)
		}
	}()
	if _, err = tmp.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err = tmp.Chmod(0o644); err != nil {
		return fmt.Errorf("chmod %s: %w", tmp.Name(), err)
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", tmp.Name(), err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp.Name(), err)
	}
	if err = dir.ReplaceFile(tmpName, base); err != nil {
		return err
	}
	dir.Sync()
	return nil
}

var textfileSeq atomic.Uint64

// removeTextfile removes the textfile at path, a path no longer configured: beneath its
// directory's safely walked fd, and only a regular file (a link or a directory someone put
// there since is left alone, with the reason).
func removeTextfile(path string) error {
	dir, base, err := safefs.OpenParent(path)
	if err != nil {
		return fmt.Errorf("textfile directory: %w", err)
	}
	defer dir.Close()
	_, err = dir.RemoveFile(base)
	return err
}

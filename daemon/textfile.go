package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
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
// report frozen values for ever. Once both of its files exist, writing needs no new
// block, so a full disk does not stop it (replaceTextfile). A failed write (a missing
// directory, a first write on a full disk) leaves the last complete file in place:
// node_textfile_mtime_seconds then shows its age, which is what the stale-textfile
// alert watches. The file stays when sandboxd
// stops, for the same reason: a stopped sandboxd must look stale, not vanish.
func (d *Daemon) runTextfile(ctx context.Context) {
	var written string // the path of the last successful write
	var failing error  // the failure of this episode, logged once until a write succeeds again
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
			case err != nil && failing == nil:
				// One line per episode (issue 25): an error's text may change from one
				// round to the next (a name, a figure), the episode does not.
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

// writeTextfile renders g in the text exposition format and publishes it at path for
// node_exporter's textfile collector. A collector that fails costs only its own series,
// as on /metrics (ContinueOnError): ok reports whether the file was replaced, err what
// went wrong either way.
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

// textfileMinCapacity is the least size of the two textfiles: a few per-object series
// more (a site, a mount) then fit without growing them.
const textfileMinCapacity = 16 << 10

// textfileSpare names the second file of path: hidden and not *.prom, so node_exporter
// never reads it.
func textfileSpare(base string) string { return "." + base + ".spare" }

// replaceTextfile publishes the document so that, once both files exist, no write needs a
// new block (issue 25): the textfile and its spare are regular files of the same size,
// written in full (real data, not fallocate's unwritten extents, whose conversion can
// still need metadata blocks). Each round overwrites the spare in place with the document,
// padded to the file's size with blank lines (the text format ignores them), fsyncs it and
// exchanges the two names atomically (renameat2 RENAME_EXCHANGE). A reader sees one whole
// document or the other; the figures stay current on a full disk, which is when they
// matter (a textfile that froze there reported 8 MiB free for minutes of 0 B). Only a
// document that outgrows the files (by then twice its first size) allocates, once.
// A copy-on-write filesystem (btrfs) allocates on every overwrite: there a full disk still
// freezes the file, and its mtime shows it.
//
// Every step works beneath the directory's fd as safefs walked it from "/" (issue 9): a
// directory reached through a symlink is refused with the reason, so the exchange can
// never touch a file somewhere else, nor through an ancestor anyone may write. An ancestor
// owned by one other user is allowed (safefs.OpenParentToWrite says why): Debian's
// textfile directory lives in /var/lib/prometheus, owned by the prometheus user. The spare
// is only written when it is sandboxd's own single-linked regular file; a textfile that is
// not (a link planted at its name, an older file of someone else) is replaced by rename,
// never exchanged into the spare's place.
func replaceTextfile(path string, mfs []*dto.MetricFamily) error {
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
	spare := textfileSpare(base)
	f, _, err := dir.OpenOwnFile(spare, 0o644)
	if err != nil {
		return fmt.Errorf("spare textfile: %w", err)
	}
	err = overwriteSpare(f, buf.Bytes())
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close %s: %w", f.Name(), cerr)
	}
	if err != nil {
		return err
	}
	cur, err := dir.Lstat(base)
	switch {
	case err == nil && cur.Type == unix.S_IFREG && cur.Uid == uint32(unix.Geteuid()) && cur.Nlink == 1:
		err = dir.Exchange(spare, base)
	case err == nil || errors.Is(err, unix.ENOENT):
		// The first write, or a name holding what is not ours: rename over it (the one
		// round that leaves no spare; the next creates it).
		err = dir.ReplaceFile(spare, base)
	}
	if err != nil {
		return err
	}
	dir.Sync()
	return nil
}

// overwriteSpare writes doc over f from offset 0 and pads it with newlines to f's size,
// growing f to textfileMinCapacity or twice doc (whichever is more) when doc does not fit.
func overwriteSpare(f *os.File, doc []byte) error {
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat %s: %w", f.Name(), err)
	}
	size := int(fi.Size())
	if size < len(doc) {
		size = max(textfileMinCapacity, 2*len(doc))
	}
	page := make([]byte, size)
	copy(page, doc)
	for i := len(doc); i < size; i++ {
		page[i] = '\n'
	}
	if _, err := f.WriteAt(page, 0); err != nil {
		return fmt.Errorf("write %s: %w", f.Name(), err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", f.Name(), err)
	}
	return nil
}

// removeTextfile removes the textfile at path, a path no longer configured: beneath its
// directory's safely walked fd, and only a regular file (a link or a directory someone put
// there since is left alone, with the reason).
func removeTextfile(path string) error {
	dir, base, err := safefs.OpenParent(path)
	if err != nil {
		return fmt.Errorf("textfile directory: %w", err)
	}
	defer dir.Close()
	if _, err := dir.RemoveFile(textfileSpare(base)); err != nil && !errors.Is(err, unix.ENOENT) {
		return err
	}
	_, err = dir.RemoveFile(base)
	return err
}

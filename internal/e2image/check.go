// Package e2image inspects and recovers the ext4 disk image of a stopped VM from the host
// (`sandboxd image check|recover`, CONTRACT §13), through e2fsprogs — dumpe2fs, debugfs and
// e2fsck, the field's own tools — never by mounting it. A VM whose overlay disk was full at
// stop cannot boot (its init cannot write the overlay root); removing the sandboxd reserve
// inside the image gives it the room, and the journal is replayed first so that what the
// guest wrote before the stop is what the tools see.
package e2image

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"github.com/sandboxd/sandboxd/api"
)

// DefaultReservePaths are where a sandboxd reserve lies inside an image, as the guest's
// daemon places it: <mountpoint>/.sandboxd-reserve when the image is a watched filesystem
// that does not hold the state dir (a VM's overlay disk), <state_dir>/reserve when the
// image is the guest's root with the default state dir.
var DefaultReservePaths = []string{"/.sandboxd-reserve", "/var/lib/sandboxd/reserve"}

// Report is what `sandboxd image check` says of an image.
type Report struct {
	Image      string `json:"image"`
	SizeBytes  uint64 `json:"size_bytes"`
	FreeBytes  uint64 `json:"free_bytes"`  // free blocks × block size, root's reserved blocks included
	AvailBytes uint64 `json:"avail_bytes"` // what a non-root writer gets: free less root's reserved blocks
	Files      uint64 `json:"files"`
	FilesFree  uint64 `json:"files_free"`
	BlockSize  uint64 `json:"block_size"`
	State      string `json:"state"` // the superblock's "Filesystem state": clean, not clean, ...
	// Journal: "none", "clean", or "needs recovery" (the guest stopped without unmounting:
	// the free counts above are the superblock's until the journal is replayed).
	Journal     string   `json:"journal"`
	Reserve     string   `json:"reserve,omitempty"` // the reserve's path inside the image ("" when none)
	ReserveSize uint64   `json:"reserve_bytes"`     // its allocation
	Looked      []string `json:"reserve_paths_looked_at"`
	Line        string   `json:"line"`
}

// Tools are the e2fsprogs binaries (found on PATH and in /sbin, /usr/sbin by Find).
type Tools struct{ Dumpe2fs, Debugfs, E2fsck string }

// Find looks the tools up: PATH, then /usr/sbin and /sbin (not on a user's PATH on Debian).
func Find() (Tools, error) {
	var t Tools
	var missing []string
	for _, x := range []struct {
		name string
		dst  *string
	}{{"dumpe2fs", &t.Dumpe2fs}, {"debugfs", &t.Debugfs}, {"e2fsck", &t.E2fsck}} {
		if p, err := exec.LookPath(x.name); err == nil {
			*x.dst = p
			continue
		}
		found := false
		for _, d := range []string{"/usr/sbin/", "/sbin/"} {
			if st, err := os.Stat(d + x.name); err == nil && st.Mode().IsRegular() {
				*x.dst, found = d+x.name, true
				break
			}
		}
		if !found {
			missing = append(missing, x.name)
		}
	}
	if len(missing) > 0 {
		return t, fmt.Errorf("%s not found: install e2fsprogs", strings.Join(missing, ", "))
	}
	return t, nil
}

// ErrNotExt4 says the file is not an ext2/3/4 image dumpe2fs can read.
var ErrNotExt4 = errors.New("not an ext2/ext3/ext4 image")

// Check reads the image (read-only: dumpe2fs -h, debugfs without -w) and reports its free
// blocks and inodes, the journal's state and the sandboxd reserve inside it, if any, at
// one of paths (DefaultReservePaths when empty).
func (t Tools) Check(ctx context.Context, image string, paths []string) (Report, error) {
	rep := Report{Image: image}
	if len(paths) == 0 {
		paths = DefaultReservePaths
	}
	rep.Looked = paths
	st, err := os.Stat(image)
	if err != nil {
		return rep, fmt.Errorf("image %s: %w", image, err)
	}
	if !st.Mode().IsRegular() && st.Mode()&os.ModeDevice == 0 {
		return rep, fmt.Errorf("image %s: not a regular file or a block device", image)
	}
	out, err := exec.CommandContext(ctx, t.Dumpe2fs, "-h", image).Output()
	if err != nil {
		return rep, fmt.Errorf("dumpe2fs -h %s: %w: %s", image, ErrNotExt4, lastLine(err))
	}
	if err := rep.parseSuperblock(out); err != nil {
		return rep, fmt.Errorf("dumpe2fs -h %s: %w", image, err)
	}
	rep.Reserve, rep.ReserveSize, err = t.findReserve(ctx, image, paths)
	if err != nil {
		return rep, err
	}
	rep.Line = rep.line()
	return rep, nil
}

// parseSuperblock fills the figures from dumpe2fs -h's "Key: value" lines.
func (r *Report) parseSuperblock(out []byte) error {
	kv := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok {
			kv[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	num := func(k string) (uint64, error) {
		v, ok := kv[k]
		if !ok {
			return 0, fmt.Errorf("no %q in the superblock", k)
		}
		return strconv.ParseUint(v, 10, 64)
	}
	var errs []error
	get := func(k string) uint64 {
		n, err := num(k)
		if err != nil {
			errs = append(errs, err)
		}
		return n
	}
	bs, blocks, free, reserved := get("Block size"), get("Block count"), get("Free blocks"), get("Reserved block count")
	r.Files, r.FilesFree = get("Inode count"), get("Free inodes")
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	r.BlockSize, r.SizeBytes, r.FreeBytes = bs, blocks*bs, free*bs
	if free > reserved {
		r.AvailBytes = (free - reserved) * bs
	}
	r.State = kv["Filesystem state"]
	features := " " + kv["Filesystem features"] + " "
	switch {
	case !strings.Contains(features, " has_journal "):
		r.Journal = "none"
	case strings.Contains(features, " needs_recovery "):
		r.Journal = "needs recovery"
	default:
		r.Journal = "clean"
	}
	return nil
}

// findReserve looks for a regular file at each of paths inside the image with one
// read-only debugfs, and returns the first one found with its allocation.
func (t Tools) findReserve(ctx context.Context, image string, paths []string) (string, uint64, error) {
	var cmds strings.Builder
	for _, p := range paths {
		if strings.ContainsAny(p, "\n\"") || !strings.HasPrefix(p, "/") {
			return "", 0, fmt.Errorf("reserve path %q: give an absolute path inside the image", p)
		}
		fmt.Fprintf(&cmds, "stat \"%s\"\n", p)
	}
	cmd := exec.CommandContext(ctx, t.Debugfs, "-f", "-", image)
	cmd.Stdin = strings.NewReader(cmds.String())
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", 0, fmt.Errorf("debugfs %s: %w: %s", image, err, strings.TrimSpace(string(out)))
	}
	// Each command's answer follows its echo, "debugfs: stat "/x"".
	sections := strings.Split(string(out), "debugfs: stat ")
	for i, p := range paths {
		if i+1 >= len(sections) {
			break
		}
		s := sections[i+1]
		if !strings.Contains(s, "Type: regular") {
			continue
		}
		if n, ok := field(s, "Blockcount:"); ok {
			return p, n * 512, nil
		}
	}
	return "", 0, nil
}

// field is the number after key in debugfs's stat output.
func field(s, key string) (uint64, bool) {
	i := strings.Index(s, key)
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+len(key):])
	if len(f) == 0 {
		return 0, false
	}
	n, err := strconv.ParseUint(f[0], 10, 64)
	return n, err == nil
}

func (r Report) line() string {
	s := fmt.Sprintf("%s: %s free of %s (%s of %s inodes free); filesystem %s; journal %s",
		r.Image, api.FormatSize(r.AvailBytes), api.FormatSize(r.SizeBytes), api.FormatCount(r.FilesFree), api.FormatCount(r.Files),
		r.State, r.Journal)
	if r.Journal == "needs recovery" {
		s += " (the guest stopped without unmounting: free counts are the superblock's until `sandboxd image recover` replays it)"
	}
	if r.Reserve != "" {
		return s + fmt.Sprintf("; sandboxd reserve %s inside holds %s", r.Reserve, api.FormatSize(r.ReserveSize))
	}
	return s + "; no sandboxd reserve inside (looked at " + strings.Join(r.Looked, ", ") + ")"
}

// lastLine is the last line a failed tool wrote to stderr (the first is its version banner).
func lastLine(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		lines := strings.Split(strings.TrimSpace(string(ee.Stderr)), "\n")
		return strings.TrimSpace(lines[len(lines)-1])
	}
	return err.Error()
}

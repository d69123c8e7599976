// Package mountinfo parses /proc/PID/mountinfo (proc(5)) for every package that must
// know the mounts without touching them: reading mountinfo never blocks, even while a
// FUSE mount hangs, unlike stat or statfs of a mount's path. Octal escapes (\040 for a
// space) are decoded here, which prometheus/procfs does not do.
package mountinfo

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Entry is one mount.
type Entry struct {
	MountID, ParentID int
	Major, Minor      uint32 // st_dev of the filesystem; for FUSE, Minor is the fusectl connection
	Root              string // the path within the filesystem that is mounted
	MountPoint        string
	MountOpts         string
	FSType            string
	Source            string
	SuperOpts         map[string]string
}

// Device is "major:minor".
func (e Entry) Device() string { return fmt.Sprintf("%d:%d", e.Major, e.Minor) }

// Read parses <procRoot>/self/mountinfo. Lines that do not parse are skipped and
// counted in the error, which comes with the entries that did parse.
func Read(procRoot string) ([]Entry, error) {
	b, err := os.ReadFile(filepath.Join(procRoot, "self", "mountinfo"))
	if err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	return Parse(b)
}

// Parse parses mountinfo text.
func Parse(b []byte) ([]Entry, error) {
	var out []Entry
	bad := 0
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			continue
		}
		e, ok := ParseLine(line)
		if !ok {
			bad++
			continue
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("parse mountinfo: %w", err)
	}
	if bad > 0 {
		return out, fmt.Errorf("parse mountinfo: %d malformed lines skipped", bad)
	}
	return out, nil
}

// ParseLine parses one line:
// 36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
// The optional fields end at the lone "-".
func ParseLine(line string) (Entry, bool) {
	f := strings.Fields(line)
	if len(f) < 7 {
		return Entry{}, false
	}
	sep := -1
	for i := 6; i < len(f); i++ {
		if f[i] == "-" {
			sep = i
			break
		}
	}
	if sep < 0 || sep+1 >= len(f) {
		return Entry{}, false
	}
	id, err1 := strconv.Atoi(f[0])
	parent, err2 := strconv.Atoi(f[1])
	majS, minS, ok := strings.Cut(f[2], ":")
	maj, err3 := strconv.ParseUint(majS, 10, 32)
	min, err4 := strconv.ParseUint(minS, 10, 32)
	if !ok || err1 != nil || err2 != nil || err3 != nil || err4 != nil || !strings.HasPrefix(f[4], "/") {
		return Entry{}, false
	}
	e := Entry{
		MountID: id, ParentID: parent, Major: uint32(maj), Minor: uint32(min),
		Root: Unescape(f[3]), MountPoint: Unescape(f[4]), MountOpts: f[5],
		FSType: Unescape(f[sep+1]), SuperOpts: map[string]string{},
	}
	if sep+2 < len(f) {
		e.Source = Unescape(f[sep+2])
	}
	if sep+3 < len(f) {
		for _, o := range strings.Split(f[sep+3], ",") {
			k, v, _ := strings.Cut(o, "=")
			e.SuperOpts[k] = Unescape(v)
		}
	}
	return e, true
}

// Unescape decodes the kernel's \ooo escapes (space \040, tab \011, newline \012,
// backslash \134). Anything that is not a valid escape of one byte is kept as written.
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) && s[i+1] <= '3' {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

// Under reports whether path lies on or below mountpoint, by name.
func Under(path, mountpoint string) bool {
	if mountpoint == "/" {
		return strings.HasPrefix(path, "/")
	}
	// path == mountpoint or path starts with mountpoint+"/", without building that string
	// (Deepest asks it of every mount, on every launch's measurement: issue 27).
	return strings.HasPrefix(path, mountpoint) && (len(path) == len(mountpoint) || path[len(mountpoint)] == '/')
}

// Deepest returns the entry with the longest mount point that contains path by name and
// satisfies match (nil: any), and whether there is one. Later entries win ties (the top
// of a stack of mounts on one path).
func Deepest(entries []Entry, path string, match func(Entry) bool) (Entry, bool) {
	var best Entry
	found := false
	for _, e := range entries {
		if !Under(path, e.MountPoint) || (match != nil && !match(e)) {
			continue
		}
		if !found || len(e.MountPoint) >= len(best.MountPoint) {
			best, found = e, true
		}
	}
	return best, found
}

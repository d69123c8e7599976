package mountwatch

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// mountEntry is one line of mountinfo, the fields mountwatch needs.
type mountEntry struct {
	MountID    int
	Major      uint32
	Minor      uint32 // for FUSE: the connection number under fusectl
	MountPoint string
	FSType     string
	Source     string
	SuperOpts  map[string]string
	// UserID is the owner from the user_id= super option; -1 when absent.
	UserID  int
	GroupID int
}

// isFUSE reports whether an fstype is served by FUSE (fuse, fuse.geesefs, fuseblk).
func isFUSE(fstype string) bool {
	return fstype == "fuse" || fstype == "fuseblk" || strings.HasPrefix(fstype, "fuse.")
}

// readMountinfo reads <procRoot>/self/mountinfo. Reading it never blocks on a hung
// FUSE mount (FIELD-NOTES), so it is safe on the supervisor loop.
func readMountinfo(procRoot string) ([]mountEntry, error) {
	b, err := os.ReadFile(filepath.Join(procRoot, "self", "mountinfo"))
	if err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	return parseMountinfo(b)
}

// parseMountinfo parses proc(5) mountinfo text. Malformed lines are skipped and
// reported in the error together with the entries that did parse.
func parseMountinfo(b []byte) ([]mountEntry, error) {
	var out []mountEntry
	var bad int
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			continue
		}
		e, ok := parseMountinfoLine(line)
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

// parseMountinfoLine parses one line:
// 36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
func parseMountinfoLine(line string) (mountEntry, bool) {
	f := strings.Fields(line)
	sep := -1
	for i := 6; i < len(f); i++ {
		if f[i] == "-" {
			sep = i
			break
		}
	}
	if len(f) < 7 || sep < 0 || len(f) < sep+3 {
		return mountEntry{}, false
	}
	id, err := strconv.Atoi(f[0])
	if err != nil {
		return mountEntry{}, false
	}
	maj, min, ok := strings.Cut(f[2], ":")
	if !ok {
		return mountEntry{}, false
	}
	ma, err1 := strconv.ParseUint(maj, 10, 32)
	mi, err2 := strconv.ParseUint(min, 10, 32)
	if err1 != nil || err2 != nil {
		return mountEntry{}, false
	}
	e := mountEntry{
		MountID:    id,
		Major:      uint32(ma),
		Minor:      uint32(mi),
		MountPoint: unescapeOctal(f[4]),
		FSType:     unescapeOctal(f[sep+1]),
		Source:     unescapeOctal(f[sep+2]),
		SuperOpts:  map[string]string{},
		UserID:     -1,
		GroupID:    -1,
	}
	if len(f) > sep+3 {
		for _, o := range strings.Split(f[sep+3], ",") {
			k, v, _ := strings.Cut(o, "=")
			e.SuperOpts[k] = unescapeOctal(v)
		}
	}
	if v, ok := e.SuperOpts["user_id"]; ok {
		if n, err := strconv.Atoi(v); err == nil && n >= 0 {
			e.UserID = n
		}
	}
	if v, ok := e.SuperOpts["group_id"]; ok {
		if n, err := strconv.Atoi(v); err == nil && n >= 0 {
			e.GroupID = n
		}
	}
	return e, true
}

// unescapeOctal decodes the kernel's \ooo escapes (space, tab, newline, backslash) that
// procfs leaves in place.
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			v := (s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0')
			b.WriteByte(v)
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

// topmostAt returns the last (topmost) mountinfo entry whose mountpoint is path.
func topmostAt(entries []mountEntry, path string) (mountEntry, bool) {
	for i := len(entries) - 1; i >= 0; i-- {
		if entries[i].MountPoint == path {
			return entries[i], true
		}
	}
	return mountEntry{}, false
}

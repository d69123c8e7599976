package pressure

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// mountEntry is one line of /proc/self/mountinfo, reduced to what a filesystem object shows.
type mountEntry struct {
	Major, Minor uint32
	Mountpoint   string
	FSType       string
	Source       string
}

func (m mountEntry) device() string { return fmt.Sprintf("%d:%d", m.Major, m.Minor) }

// parseMountinfo reads mountinfo lines (proc(5)); lines it cannot read are skipped, so one
// odd entry never hides the others.
func parseMountinfo(data []byte) []mountEntry {
	var out []mountEntry
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		if e, ok := parseMountinfoLine(sc.Text()); ok {
			out = append(out, e)
		}
	}
	return out
}

// parseMountinfoLine parses "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw".
// The optional fields end at the lone "-".
func parseMountinfoLine(line string) (mountEntry, bool) {
	f := strings.Fields(line)
	if len(f) < 7 {
		return mountEntry{}, false
	}
	majS, minS, ok := strings.Cut(f[2], ":")
	if !ok {
		return mountEntry{}, false
	}
	maj, err1 := strconv.ParseUint(majS, 10, 32)
	min, err2 := strconv.ParseUint(minS, 10, 32)
	if err1 != nil || err2 != nil {
		return mountEntry{}, false
	}
	sep := -1
	for i := 6; i < len(f); i++ {
		if f[i] == "-" {
			sep = i
			break
		}
	}
	if sep < 0 || sep+1 >= len(f) {
		return mountEntry{}, false
	}
	e := mountEntry{
		Major:      uint32(maj),
		Minor:      uint32(min),
		Mountpoint: unescapeOctal(f[4]),
		FSType:     unescapeOctal(f[sep+1]),
	}
	if sep+2 < len(f) {
		e.Source = unescapeOctal(f[sep+2])
	}
	return e, true
}

// unescapeOctal decodes the kernel's \ooo escapes (space is \040, newline \012, tab \011,
// backslash \134). Anything that is not a valid three-digit escape is kept as written.
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			v := (s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0')
			if s[i+1] <= '3' { // \400 and above do not fit a byte
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

// underMount reports whether path lies on or below mountpoint, lexically.
func underMount(path, mountpoint string) bool {
	if mountpoint == "/" {
		return strings.HasPrefix(path, "/")
	}
	return path == mountpoint || strings.HasPrefix(path, mountpoint+"/")
}

// mountTable caches mountinfo: reading it costs far more than a statfs on a node with many
// mounts, and mounts change rarely. It is reloaded when older than ttl, or at once (at most
// once per second) when a device is not found in it.
type mountTable struct {
	path string
	ttl  time.Duration

	mu       sync.Mutex // guards the fields below
	entries  []mountEntry
	loadedAt time.Time
	err      error
}

func newMountTable(procRoot string) *mountTable {
	return &mountTable{path: filepath.Join(procRoot, "self", "mountinfo"), ttl: 10 * time.Second}
}

// snapshot returns the current entries, reloading when they are older than the TTL, or
// older than a second when force is set.
func (t *mountTable) snapshot(force bool) ([]mountEntry, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	age := time.Since(t.loadedAt)
	if t.loadedAt.IsZero() || age > t.ttl || (force && age > time.Second) {
		data, err := os.ReadFile(t.path)
		t.loadedAt = time.Now()
		if err != nil {
			t.err = fmt.Errorf("read %s: %w", t.path, err)
		} else {
			t.entries, t.err = parseMountinfo(data), nil
		}
	}
	return t.entries, t.err
}

// lexicalMount is the deepest mountpoint that holds path by name alone (no syscall on the
// path, so it cannot hang). It keys the one-call-per-filesystem rule; "" when unknown.
func (t *mountTable) lexicalMount(path string) string {
	entries, _ := t.snapshot(false)
	return deepest(entries, path, func(mountEntry) bool { return true }).Mountpoint
}

// forDevice finds the mount of device maj:min that holds path: the deepest matching
// mountpoint that contains path, else the deepest matching one (a bind mount seen from
// elsewhere). ok is false when no entry has that device.
func (t *mountTable) forDevice(path string, maj, min uint32) (mountEntry, bool) {
	for _, force := range []bool{false, true} {
		entries, _ := t.snapshot(force)
		match := func(e mountEntry) bool { return e.Major == maj && e.Minor == min }
		if e := deepest(entries, path, match); e.Mountpoint != "" {
			return e, true
		}
		var best mountEntry
		for _, e := range entries {
			if match(e) && len(e.Mountpoint) > len(best.Mountpoint) {
				best = e
			}
		}
		if best.Mountpoint != "" {
			return best, true
		}
	}
	return mountEntry{}, false
}

// deepest returns the entry with the longest mountpoint containing path among those that
// match; on equal mountpoints the later line wins, as it is mounted on top.
func deepest(entries []mountEntry, path string, match func(mountEntry) bool) mountEntry {
	var best mountEntry
	for _, e := range entries {
		if match(e) && underMount(path, e.Mountpoint) && len(e.Mountpoint) >= len(best.Mountpoint) {
			best = e
		}
	}
	return best
}

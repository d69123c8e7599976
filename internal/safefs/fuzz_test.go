package safefs

import (
	"encoding/binary"
	"strings"
	"testing"
)

// FuzzCleanName: whatever a caller passes, an accepted name is relative, has no ".."
// component and no NUL, and cleaning it again changes nothing.
func FuzzCleanName(f *testing.F) {
	for _, s := range []string{"", ".", "a/b", "/etc", "..", "a/../b", "a//b/./c", "...", "a\x00", "a\nb/\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		got, err := cleanName(name)
		if err != nil {
			return
		}
		if strings.HasPrefix(got, "/") || strings.IndexByte(got, 0) >= 0 {
			t.Fatalf("cleanName(%q) = %q", name, got)
		}
		for _, p := range strings.Split(got, "/") {
			if p == ".." || p == "." || (p == "" && got != "") {
				t.Fatalf("cleanName(%q) = %q has component %q", name, got, p)
			}
		}
		if again, err := cleanName(got); err != nil || again != got {
			t.Fatalf("cleanName not idempotent: %q -> %q -> %q, %v", name, got, again, err)
		}
	})
}

// dirent builds one linux_dirent64 record.
func dirent(name string, dtype byte) []byte {
	reclen := (19 + len(name) + 1 + 7) &^ 7
	b := make([]byte, reclen)
	binary.NativeEndian.PutUint64(b[0:], 1)
	binary.NativeEndian.PutUint16(b[16:], uint16(reclen))
	b[18] = dtype
	copy(b[19:], name)
	return b
}

// FuzzDirentIter: a getdents buffer, however malformed, never makes the parser read out
// of bounds or return a name without its NUL terminator, "." or "..".
func FuzzDirentIter(f *testing.F) {
	var seed []byte
	for _, n := range []string{".", "..", "a", "a\nb", "\xff\xfe", strings.Repeat("x", 255)} {
		seed = append(seed, dirent(n, 8)...)
	}
	f.Add(seed)
	f.Add(seed[:len(seed)-3])
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 'a'})
	f.Fuzz(func(t *testing.T, buf []byte) {
		it := direntIter{buf: buf}
		for i := 0; ; i++ {
			_, name, ok := it.next()
			if !ok {
				break
			}
			if len(name) < 2 || name[len(name)-1] != 0 || strings.IndexByte(string(name[:len(name)-1]), 0) >= 0 {
				t.Fatalf("bad name %q", name)
			}
			if s := string(name[:len(name)-1]); s == "." || s == ".." {
				t.Fatalf("returned %q", s)
			}
			if i > len(buf) {
				t.Fatal("no progress")
			}
		}
	})
}

func TestDirentIterParsesRecords(t *testing.T) {
	var buf []byte
	for _, n := range []string{".", "..", "a\nb", "\xff\xfe"} {
		buf = append(buf, dirent(n, 4)...)
	}
	it := direntIter{buf: buf}
	var got []string
	for {
		typ, name, ok := it.next()
		if !ok {
			break
		}
		if typ != 4 {
			t.Errorf("type %d", typ)
		}
		got = append(got, string(name[:len(name)-1]))
	}
	if strings.Join(got, "|") != "a\nb|\xff\xfe" {
		t.Fatalf("got %q", got)
	}
}

package proclocks

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func FuzzParse(f *testing.F) {
	f.Add([]byte("1: POSIX  ADVISORY  WRITE 1234 08:01:123456 0 EOF\n" +
		"2: FLOCK  ADVISORY  WRITE 1235 00:2e:5678 0 EOF\n" +
		"3: OFDLCK ADVISORY  READ  -1 103:02:9999 0 EOF\n" +
		"3: -> FLOCK  ADVISORY  WRITE 1236 00:2e:77 0 EOF\n" +
		"4: LEASE  ACTIVE    READ 1 00:2e:1 0 EOF\n"))
	f.Add([]byte("garbage\n\n:::\n1: POSIX x y z zz:yy:xx 0 EOF"))
	f.Fuzz(func(t *testing.T, data []byte) {
		out := map[Inode]struct{}{}
		Parse(data, out)
	})
}

func TestParse(t *testing.T) {
	out := map[Inode]struct{}{}
	Parse([]byte("1: POSIX  ADVISORY  WRITE 1234 08:01:123456 0 EOF\n"+
		"2: FLOCK  ADVISORY  WRITE 1235 00:2e:5678 0 EOF\n"+
		"3: OFDLCK ADVISORY  READ  -1 103:1f:9999 0 EOF\n"+
		"3: -> FLOCK  ADVISORY  WRITE 1236 00:2e:77 0 EOF\n"+
		"4: LEASE  ACTIVE    READ 1 00:2e:1 0 EOF\n"), out)
	want := []Inode{{8, 1, 123456}, {0, 0x2e, 5678}, {0x103, 0x1f, 9999}}
	if len(out) != len(want) {
		t.Fatalf("got %v, want %v", out, want)
	}
	for _, w := range want {
		if _, ok := out[w]; !ok {
			t.Errorf("missing %v in %v", w, out)
		}
	}
}

// A Reader sees every change of the host's locks on each Read, through its one fd: a
// flock taken shows, and released is gone again.
func TestReaderIsCurrent(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "lock")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	me := Inode{Major: unix.Major(st.Dev), Minor: unix.Minor(st.Dev), Ino: st.Ino}
	r := NewReader("/proc")
	defer r.Close()
	for round := range 3 {
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
			t.Fatal(err)
		}
		locks, err := r.Read()
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := locks[me]; !ok {
			t.Fatalf("round %d: the flock held on %+v is not in %v", round, me, locks)
		}
		unix.Flock(int(f.Fd()), unix.LOCK_UN)
		if locks, _ = r.Read(); len(locks) > 0 {
			if _, ok := locks[me]; ok {
				t.Fatalf("round %d: the released flock is still read", round)
			}
		}
	}
	// A proc root without a locks file reads as no locks, as Read does.
	if locks, err := NewReader(t.TempDir()).Read(); err != nil || len(locks) != 0 {
		t.Fatalf("missing locks file: %v, %v", locks, err)
	}
}

// A locks file bigger than the Reader's buffer is read whole.
func TestReaderGrowsItsBuffer(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	for i := range 2000 { // ~100 KiB, past the 16 KiB first buffer
		fmt.Fprintf(&b, "%d: POSIX  ADVISORY  WRITE %d 08:01:%d 0 EOF\n", i+1, 1000+i, 100000+i)
	}
	if err := os.WriteFile(filepath.Join(dir, "locks"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	r := NewReader(dir)
	defer r.Close()
	locks, err := r.Read()
	if err != nil || len(locks) != 2000 {
		t.Fatalf("read %d locks, %v; want 2000", len(locks), err)
	}
	if _, ok := locks[Inode{Major: 8, Minor: 1, Ino: 101999}]; !ok {
		t.Fatal("the last lock of the file is missing")
	}
}

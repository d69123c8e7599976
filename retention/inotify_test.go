package retention

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"golang.org/x/sys/unix"
)

// inotifyRecord builds one struct inotify_event with its name NUL-padded to pad bytes.
func inotifyRecord(mask uint32, name string, pad int) []byte {
	b := make([]byte, unix.SizeofInotifyEvent+pad)
	binary.NativeEndian.PutUint32(b[0:], 1)
	binary.NativeEndian.PutUint32(b[4:], mask)
	binary.NativeEndian.PutUint32(b[12:], uint32(pad))
	copy(b[unix.SizeofInotifyEvent:], name)
	return b
}

type seenEvent struct {
	name     string
	op       fsnotify.Op
	overflow bool
}

func parseAll(buf []byte) []seenEvent {
	var out []seenEvent
	parseInotify(buf, func(name string, op fsnotify.Op, overflow bool) {
		out = append(out, seenEvent{name, op, overflow})
	})
	return out
}

func TestParseInotify(t *testing.T) {
	var buf []byte
	buf = append(buf, inotifyRecord(unix.IN_CREATE, "a1.out", 16)...)
	buf = append(buf, inotifyRecord(unix.IN_DELETE, "a1.pid", 16)...)
	buf = append(buf, inotifyRecord(unix.IN_MODIFY, "a2.out", 8)...)
	buf = append(buf, inotifyRecord(unix.IN_MOVED_FROM, "x", 4)...)
	buf = append(buf, inotifyRecord(unix.IN_MOVED_TO, "y", 4)...)
	buf = append(buf, inotifyRecord(unix.IN_ATTRIB|unix.IN_ISDIR, "d", 4)...)
	buf = append(buf, inotifyRecord(unix.IN_Q_OVERFLOW, "", 0)...)
	buf = append(buf, inotifyRecord(unix.IN_DELETE_SELF, "", 0)...)
	buf = append(buf, inotifyRecord(unix.IN_MODIFY, "", 0)...) // the dir itself: ignored
	buf = append(buf, 1, 2, 3)                                 // a torn tail: ignored
	got := parseAll(buf)
	want := []seenEvent{
		{"a1.out", fsnotify.Create, false}, {"a1.pid", fsnotify.Remove, false},
		{"a2.out", fsnotify.Write, false}, {"x", fsnotify.Rename, false}, {"y", fsnotify.Create, false},
		{"d", fsnotify.Chmod, false}, {"", 0, true}, {"", fsnotify.Remove, false},
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("event %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

// The batched reader sees creates and deletes of the watched directory, and the root
// itself going away; Close ends it.
func TestRawWatch(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "site")
	os.Mkdir(dir, 0o755)
	p := newPending()
	w, err := newRawWatch(dir, -1, p)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	os.WriteFile(filepath.Join(dir, "j.out"), []byte("x"), 0o644)
	os.Remove(filepath.Join(dir, "j.out"))
	wait := waitPending(t, p)
	wait("create and remove", func(ops map[string]fsnotify.Op, _ bool) bool {
		return ops["j.out"].Has(fsnotify.Create) && ops["j.out"].Has(fsnotify.Remove)
	})
	os.Remove(dir)
	wait("root gone", func(_ map[string]fsnotify.Op, gone bool) bool { return gone })
}

// Given the root's fd, both inotify instances watch the directory that fd holds, even
// when another directory has taken its path since it was opened.
func TestRawWatchFollowsTheRootFd(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "site")
	os.Mkdir(dir, 0o755)
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := os.Rename(dir, dir+".old"); err != nil {
		t.Fatal(err)
	}
	os.Mkdir(dir, 0o755) // an impostor at the path
	p := newPending()
	w, err := newRawWatch(dir, fd, p)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	os.WriteFile(filepath.Join(dir, "impostor.out"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(dir+".old", "j.out"), []byte("x"), 0o644)
	os.Remove(filepath.Join(dir+".old", "j.out"))
	wait := waitPending(t, p)
	wait("create and remove in the fd's directory", func(ops map[string]fsnotify.Op, _ bool) bool {
		if _, bad := ops["impostor.out"]; bad {
			t.Fatal("watched the directory now at the path, not the one the fd holds")
		}
		return ops["j.out"].Has(fsnotify.Create) && ops["j.out"].Has(fsnotify.Remove)
	})
}

// waitPending returns a helper that collects p's events until ok says they are all there.
func waitPending(t *testing.T, p *pending) func(string, func(map[string]fsnotify.Op, bool) bool) {
	return func(what string, ok func(ops map[string]fsnotify.Op, rootGone bool) bool) {
		t.Helper()
		all := map[string]fsnotify.Op{}
		gone := false
		deadline := time.Now().Add(time.Minute)
		for time.Now().Before(deadline) {
			select {
			case <-p.kick:
			case <-time.After(50 * time.Millisecond):
			}
			ops, _, rg := p.take()
			for k, v := range ops {
				all[k] |= v
			}
			gone = gone || rg
			if ok(all, gone) {
				return
			}
		}
		t.Fatalf("%s: not seen (%v, root gone %v)", what, all, gone)
	}
}

func FuzzParseInotify(f *testing.F) {
	f.Add(append(inotifyRecord(unix.IN_CREATE, "a.out", 16), inotifyRecord(unix.IN_DELETE, "b", 4)...))
	f.Add(inotifyRecord(unix.IN_Q_OVERFLOW, "", 0))
	f.Add([]byte{1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 255, 255, 255, 255})
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, e := range parseAll(data) {
			if len(e.name) > len(data) {
				t.Fatalf("name %q longer than the input", e.name)
			}
		}
	})
}

package proclocks

import "testing"

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

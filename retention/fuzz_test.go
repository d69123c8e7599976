package retention

import (
	"testing"
)

func FuzzParseStat(f *testing.F) {
	f.Add([]byte("1234 (sleep) S 1 1234 1234 0 -1 4194304 100 0 0 0 0 0 0 0 20 0 1 0 987654 1000 100"))
	f.Add([]byte("42 (a) b) (c d) R 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 555 1 2"))
	f.Add([]byte("7 (x"))
	f.Fuzz(func(t *testing.T, data []byte) {
		parseStat(data)
	})
}

func TestParseStat(t *testing.T) {
	st, err := parseStat([]byte("42 (a) b) (c d) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 555 1 2"))
	if err != nil || st.state != 'S' || st.startTicks != 555 {
		t.Fatalf("parseStat = %+v, %v; want state S, ticks 555", st, err)
	}
	if _, err := parseStat([]byte("7 (x")); err == nil {
		t.Fatal("truncated stat parsed")
	}
}

func TestNamesJob(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{
		{[]string{"sh", "a1b2.launch.sh"}, true},
		{[]string{"sh", "/tmp/aura-bg/a1b2.launch.sh"}, true},
		{[]string{"runner", "--job", "a1b2"}, true},
		{[]string{"sleep", "300"}, false},
		{[]string{"x", "a1b2c3"}, false},
	} {
		if got := namesJob(c.args, "a1b2"); got != c.want {
			t.Errorf("namesJob(%q) = %v, want %v", c.args, got, c.want)
		}
	}
}

func TestJobID(t *testing.T) {
	for name, id := range map[string]string{"a1b2.pid": "a1b2", "a1b2.launch.sh": "a1b2", "a1b2": "a1b2", ".hidden": "", "x\ny.out": "x\ny"} {
		if got := jobID(name); got != id {
			t.Errorf("jobID(%q) = %q, want %q", name, got, id)
		}
	}
}

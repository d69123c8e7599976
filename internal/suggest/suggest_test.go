package suggest

import "testing"

func TestDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"abc", "", 3}, {"", "abc", 3}, {"stauts", "status", 2},
		{"kitten", "sitting", 3}, {"launch", "launch", 0}, {"lunch", "launch", 1},
	} {
		if got := Distance(c.a, c.b); got != c.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
	long := string(make([]byte, 65))
	if got := Distance(long, "a"); got != 64 {
		t.Errorf("Distance of a 65-byte string = %d, want 64", got)
	}
}

package mountinfo

import (
	"strings"
	"testing"
)

// Under answers as its definition reads (path is mountpoint or below it by name) for
// every pair of these paths, without building mountpoint+"/".
func TestUnderIsItsDefinition(t *testing.T) {
	paths := []string{"", "/", "//", "/a", "/a/", "/a//", "/ab", "/a/b", "/a/b/", "/ab/c", "/a/bc", "a", "a/b", "/mnt/agent", "/mnt/agentx", "/mnt/agent/x"}
	for _, p := range paths {
		for _, m := range paths {
			want := strings.HasPrefix(p, "/")
			if m != "/" {
				want = p == m || strings.HasPrefix(p, m+"/")
			}
			if got := Under(p, m); got != want {
				t.Errorf("Under(%q, %q) = %v, want %v", p, m, got, want)
			}
		}
	}
}

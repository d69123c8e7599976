package systemd

import (
	"strings"
	"testing"
	"unicode"
)

// FuzzNotifierStatus: whatever line the daemon builds, systemd receives exactly one
// STATUS= assignment on one line (a newline would let a status inject READY=1).
func FuzzNotifierStatus(f *testing.F) {
	for _, s := range []string{"", "ok", "/ 68% used,\nREADY=1", "a\r\nb\tc", "\x00\n\n", strings.Repeat("x ", 500)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		sock := listenNotify(t)
		var n Notifier
		if err := n.Status(line); err != nil {
			t.Fatal(err)
		}
		got := sock.next()
		if !strings.HasPrefix(got, "STATUS=") || strings.ContainsFunc(got, unicode.IsControl) {
			t.Fatalf("Status(%q) sent %q", line, got)
		}
	})
}

package daemon

import (
	"net"
	"path/filepath"
	"testing"
)

// TestListenUnixAddrIsTheFinalPath: the listener names the path clients dial (and the
// "serving" log line prints), not the temporary name it was bound under.
func TestListenUnixAddrIsTheFinalPath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.sock")
	ln, err := ListenUnix(path, 0o660, "")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if got := ln.Addr().String(); got != path {
		t.Fatalf("Addr() = %q, want %q", got, path)
	}
	c, err := net.Dial(ln.Addr().Network(), ln.Addr().String())
	if err != nil {
		t.Fatalf("dial the listener's Addr: %v", err)
	}
	c.Close()
}

package daemon

import (
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkStatusHandler is GET /v1/status without the socket: the cost the daemon adds.
func BenchmarkStatusHandler(b *testing.B) {
	dir := b.TempDir()
	td := startDaemon(b, "[[site]]\nname = \"s\"\npath = \""+dir+"\"\n[[filesystem]]\npath = \""+dir+"\"\n")
	h := td.d.Handler()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/v1/status", nil))
		if w.Code != 200 {
			b.Fatal(w.Code)
		}
	}
}

// BenchmarkLivezHandler is the same for /livez, the floor.
func BenchmarkLivezHandler(b *testing.B) {
	dir := b.TempDir()
	td := startDaemon(b, "site = []\n[[filesystem]]\npath = \""+dir+"\"\n")
	h := td.d.Handler()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/livez", nil))
	}
}

func TestStatusCacheInvalidation(t *testing.T) {
	var c statusCache
	n := 0
	var parts uint64
	build := func() any { n++; return n }
	get := func() string {
		d, err := c.get(func() uint64 { return parts }, build)
		if err != nil {
			t.Fatal(err)
		}
		return string(d.body)
	}
	a, b := get(), get()
	if a != b || n != 1 {
		t.Fatalf("a fresh answer was rebuilt: %q %q (%d builds)", a, b, n)
	}
	c.invalidate()
	if b := get(); b != "2\n" {
		t.Fatalf("after invalidate got %q, want a rebuilt answer", b)
	}
	parts++
	if b := get(); b != "3\n" {
		t.Fatalf("after a part changed got %q, want a rebuilt answer", b)
	}
	if b := get(); b != "3\n" {
		t.Fatalf("with nothing changed got %q, want the kept answer", b)
	}
}

// BenchmarkLaunchSocket is POST /v1/launch over the socket on a site of 16,381 fresh
// entries, the path `sandboxd launch` takes (the client in the same process).
func BenchmarkLaunchSocket(b *testing.B) {
	dir := b.TempDir()
	site := filepath.Join(dir, "site")
	os.Mkdir(site, 0o755)
	for i := range 16381 {
		os.WriteFile(filepath.Join(site, fmt.Sprintf("job%d.out", i)), nil, 0o644)
	}
	td := startDaemon(b, "[[site]]\nname = \"s\"\npath = \""+site+"\"\n[[filesystem]]\npath = \""+dir+"\"\n")
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if code, _, body := td.do(b, "POST", "/v1/launch", `{"site":"s"}`); code != 200 {
			b.Fatal(code, body)
		}
	}
}

// BenchmarkLivezSocket is GET /livez over the socket, the floor of BenchmarkLaunchSocket.
func BenchmarkLivezSocket(b *testing.B) {
	dir := b.TempDir()
	td := startDaemon(b, "site = []\n[[filesystem]]\npath = \""+dir+"\"\n")
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if code, _, body := td.do(b, "GET", "/livez", ""); code != 200 {
			b.Fatal(code, body)
		}
	}
}

package daemon

import (
	"net/http/httptest"
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
	build := func() any { n++; return n }
	a, _ := c.get(build)
	b, _ := c.get(build)
	if string(a) != string(b) || n != 1 {
		t.Fatalf("a fresh answer was rebuilt: %q %q (%d builds)", a, b, n)
	}
	c.invalidate()
	if b, _ := c.get(build); string(b) != "2\n" {
		t.Fatalf("after invalidate got %q, want a rebuilt answer", b)
	}
}

package daemon

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestManyConnections: 1,000 concurrent connections making 100 requests each get no
// errors, and the daemon's heap stays bounded afterwards.
func TestManyConnections(t *testing.T) {
	if testing.Short() {
		t.Skip("100,000 requests; skipped with -short")
	}
	dir := t.TempDir()
	td := startDaemon(t, noSites(dir))
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	const conns, perConn = 1000, 100
	var failures atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for i := 0; i < conns; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			c, err := net.Dial("unix", td.sock)
			if err != nil {
				failures.Add(perConn)
				firstErr.CompareAndSwap(nil, err.Error())
				return
			}
			defer c.Close()
			br := bufio.NewReader(c)
			// /readyz and /v1/status: /livez would report a stall if this process, which
			// runs all 1,000 clients too, starved the supervisor loop for 3 s (it does under -race).
			path := "/readyz"
			if i%4 == 0 {
				path = "/v1/status"
			}
			for j := 0; j < perConn; j++ {
				fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: sandboxd\r\n\r\n", path)
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					return
				}
				_, err = bufio.NewReader(resp.Body).WriteTo(discard{})
				resp.Body.Close()
				if err != nil || resp.StatusCode != 200 {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprintf("status %d %v", resp.StatusCode, err))
				}
			}
		}(i)
	}
	wg.Wait()
	if n := failures.Load(); n > 0 {
		t.Fatalf("%d of %d requests failed; first: %v", n, conns*perConn, firstErr.Load())
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	// The test process holds both ends; 64 MiB of live heap growth would mean per-request leaks.
	if grow := int64(after.HeapAlloc) - int64(before.HeapAlloc); grow > 64<<20 {
		t.Fatalf("live heap grew by %d MiB after %d requests", grow>>20, conns*perConn)
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// TestIdleHalfOpenConnections: 100 connections that send half a request and go quiet do
// not keep other clients from being answered, and the server drops them on its timeout.
func TestIdleHalfOpenConnections(t *testing.T) {
	dir := t.TempDir()
	td := startDaemon(t, noSites(dir))
	var idle []net.Conn
	for i := 0; i < 100; i++ {
		c, err := net.Dial("unix", td.sock)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "GET /v1/status HTTP/1.1\r\nHost: sand") // never finished
		idle = append(idle, c)
	}
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	done := make(chan int, 1)
	go func() {
		status, _, _ := td.do(t, "GET", "/v1/status", "")
		done <- status
	}()
	select {
	case status := <-done:
		if status != 200 {
			t.Fatalf("status %d while 100 idle connections are open", status)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a normal client was not answered while 100 half-open connections were idle")
	}
	// The read-header timeout closes the idle ones.
	idle[0].SetReadDeadline(time.Now().Add(20 * time.Second))
	buf := make([]byte, 1)
	if _, err := idle[0].Read(buf); err == nil {
		// Some data (an error answer) is fine too; what matters is that the server ends it.
		for {
			if _, err := idle[0].Read(buf); err != nil {
				break
			}
		}
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the server kept a half-open connection beyond its read-header timeout")
	}
}

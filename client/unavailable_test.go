package client

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/sandboxd/sandboxd/api"
)

func TestFilesystemUnavailableIsTyped(t *testing.T) {
	sock := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", api.ProblemContentType)
		w.WriteHeader(503)
		w.Write([]byte(`{"type":"about:blank","status":503,"title":"filesystem unavailable","code":"filesystem_unavailable",
"detail":"/w cannot be measured: stat /w: no such file or directory (ENOENT)","filesystem":{"path":"/w","errno":"ENOENT","error":"stat /w: no such file or directory"}}`))
	})
	c := &Client{SocketPath: sock}
	_, err := c.Resume(context.Background(), api.ResumeRequest{})
	fs, ok := FilesystemUnavailable(err)
	if !ok || fs == nil || fs.Path != "/w" || fs.Errno != "ENOENT" {
		t.Fatalf("FilesystemUnavailable(%v) = %+v, %v", err, fs, ok)
	}
	var pe *ProblemError
	if !errors.As(err, &pe) || pe.StatusCode != 503 || pe.Code().ExitCode() != 75 {
		t.Fatalf("err = %#v", err)
	}
	if _, ok := FilesystemUnavailable(errors.New("other")); ok {
		t.Fatal("a plain error is filesystem_unavailable")
	}
}

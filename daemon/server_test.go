package daemon

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

func noSites(dir string) string {
	return "site = []\n[[filesystem]]\npath = \"" + dir + "\"\n"
}

func TestProblemAnswers(t *testing.T) {
	dir := t.TempDir()
	td := startDaemon(t, noSites(dir))
	cases := []struct {
		method, path, body string
		status             int
		code               api.Code
	}{
		{"GET", "/v1/nope", "", 404, api.CodeNotFound},
		{"DELETE", "/v1/status", "", 405, api.CodeMethodNotAllowed},
		{"GET", "/v1/launch", "", 405, api.CodeMethodNotAllowed},
		{"POST", "/v1/launch", `{"need_bytes":`, 400, api.CodeBadRequest},
		{"POST", "/v1/launch", `{"need_inodes":"x"}`, 400, api.CodeBadRequest},
		{"POST", "/v1/reclaim", `{"dry_run":"yes"}`, 400, api.CodeBadRequest},
		{"POST", "/v1/resume", `{"deadline":"soon"}`, 400, api.CodeBadRequest},
		{"POST", "/v1/launch", `{"site":"` + strings.Repeat("x", api.MaxBodyBytes) + `"}`, 413, api.CodePayloadTooLarge},
		{"POST", "/v1/launch", `{"site":"nosuch"}`, 404, api.CodeNotFound},
		{"POST", "/v1/launch", `{"mounts":["nosuch"]}`, 404, api.CodeNotFound},
		{"GET", "/v1/events?since=abc", "", 400, api.CodeBadRequest},
	}
	for _, c := range cases {
		status, ctype, body := td.do(t, c.method, c.path, c.body)
		if status != c.status || ctype != api.ProblemContentType {
			t.Errorf("%s %s: status %d (%s), want %d problem+json; body %s", c.method, c.path, status, ctype, c.status, body)
			continue
		}
		var p api.Problem
		if err := json.Unmarshal([]byte(body), &p); err != nil || p.Code != c.code || p.Status != c.status || p.Detail == "" || p.Type != "about:blank" {
			t.Errorf("%s %s: problem %+v (%v), want code %s", c.method, c.path, p, err, c.code)
		}
	}
}

func TestUnknownFieldsAreWarnings(t *testing.T) {
	dir := t.TempDir()
	td := startDaemon(t, noSites(dir))
	status, _, body := td.do(t, "POST", "/v1/launch", `{"need_bytes":"1KiB","future_field":true}`)
	if status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	var r api.LaunchResponse
	json.Unmarshal([]byte(body), &r)
	if len(r.Warnings) != 1 || !strings.Contains(r.Warnings[0], "future_field") {
		t.Fatalf("warnings %q do not name the unknown field", r.Warnings)
	}
	status, _, body = td.do(t, "POST", "/v1/reclaim", `{"dry_run":true,"newer":1}`)
	if status != 200 || !strings.Contains(body, "newer") {
		t.Fatalf("reclaim: %d %s", status, body)
	}
}

// TestStatusMatchesStatfs compares /v1/status with statfs on a tmpfs of known size.
func TestStatusMatchesStatfs(t *testing.T) {
	mnt := testenv.Tmpfs(t, 64<<20, 3000)
	if err := testenv.Fill(mnt+"/data", 10<<20); err != nil {
		t.Fatal(err)
	}
	td := startDaemon(t, noSites(mnt))
	st, err := td.client.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.APIVersion != 1 || len(st.Features) == 0 || st.Mode != "enforce" {
		t.Fatalf("status header %+v", st)
	}
	var sf unix.Statfs_t
	if err := unix.Statfs(mnt, &sf); err != nil {
		t.Fatal(err)
	}
	fs := st.Filesystems[0]
	if fs.Path != mnt || fs.Mountpoint != mnt || fs.FSType != "tmpfs" {
		t.Fatalf("identity %+v", fs)
	}
	if fs.SizeBytes != 64<<20 || fs.SizeBytes != sf.Blocks*uint64(sf.Frsize) {
		t.Errorf("size_bytes %d, statfs %d", fs.SizeBytes, sf.Blocks*uint64(sf.Frsize))
	}
	if fs.AvailBytes != sf.Bavail*uint64(sf.Frsize) {
		t.Errorf("avail_bytes %d, statfs %d", fs.AvailBytes, sf.Bavail*uint64(sf.Frsize))
	}
	if fs.Files != 3000 || fs.Files != sf.Files || fs.FilesFree != sf.Ffree {
		t.Errorf("files %d/%d, statfs %d/%d", fs.Files, fs.FilesFree, sf.Files, sf.Ffree)
	}
	want := float64(10<<20) / float64(64<<20)
	if fs.UsedRatio < want-0.01 || fs.UsedRatio > want+0.01 {
		t.Errorf("used_ratio %f, want about %f", fs.UsedRatio, want)
	}
}

func TestLivezReadyzHealthEvents(t *testing.T) {
	dir := t.TempDir()
	td := startDaemon(t, noSites(dir))
	for _, p := range []string{"/livez", "/readyz", "/v1/health"} {
		if status, _, body := td.do(t, "GET", p, ""); status != 200 || !strings.Contains(body, `"status"`) {
			t.Errorf("%s: %d %s", p, status, body)
		}
	}
	page, err := td.client.Events(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Events) == 0 || page.Events[0].Seq != 1 || page.Events[0].Kind != api.EventLifecycle {
		t.Fatalf("events %+v", page.Events)
	}
	later, _ := td.client.Events(context.Background(), page.Next)
	if len(later.Events) != 0 && later.Events[0].Seq <= page.Next {
		t.Fatalf("since=%d returned old events %+v", page.Next, later.Events)
	}
}

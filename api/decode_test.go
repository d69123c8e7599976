package api

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

func problemCode(t *testing.T, err error) Code {
	t.Helper()
	var p *Problem
	if !errors.As(err, &p) {
		t.Fatalf("error %v is not a *Problem", err)
	}
	return p.Code
}

func TestDecodeRequest(t *testing.T) {
	cases := []struct {
		name     string
		body     string
		code     Code
		warnings int
		check    func(t *testing.T, r LaunchRequest)
	}{
		{name: "empty body is {}", body: ""},
		{name: "null is {}", body: "null"},
		{name: "full", body: `{"site":"aura-bg","need_bytes":1048576,"need_inodes":16,"mounts":["agent"],"deadline":"2s"}`,
			check: func(t *testing.T, r LaunchRequest) {
				if r.Site != "aura-bg" || *r.NeedBytes != 1<<20 || *r.NeedInodes != 16 || r.Mounts[0] != "agent" || r.Deadline.D() != 2*time.Second {
					t.Errorf("decoded %+v", r)
				}
			}},
		{name: "size string", body: `{"need_bytes":"1.5GiB"}`, check: func(t *testing.T, r LaunchRequest) {
			if *r.NeedBytes != Size(1.5*(1<<30)) {
				t.Errorf("need_bytes = %d", *r.NeedBytes)
			}
		}},
		{name: "unknown fields warn", body: `{"site":"x","future":1,"zeta":{"a":1}}`, warnings: 2},
		{name: "malformed", body: `{"site":`, code: CodeBadRequest},
		{name: "wrong type", body: `{"site":12}`, code: CodeBadRequest},
		{name: "negative size", body: `{"need_bytes":-1}`, code: CodeBadRequest},
		{name: "bad size string", body: `{"need_bytes":"lots"}`, code: CodeBadRequest},
		{name: "bad duration", body: `{"deadline":"soon"}`, code: CodeBadRequest},
		{name: "not an object", body: `[1,2]`, code: CodeBadRequest},
		{name: "trailing data", body: `{} {}`, code: CodeBadRequest},
		{name: "too large", body: `{"site":"` + strings.Repeat("a", MaxBodyBytes) + `"}`, code: CodePayloadTooLarge},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var r LaunchRequest
			w, err := DecodeRequest(strings.NewReader(c.body), &r)
			if c.code != "" {
				if err == nil {
					t.Fatalf("want %s, got no error", c.code)
				}
				if got := problemCode(t, err); got != c.code {
					t.Fatalf("code = %s, want %s (%v)", got, c.code, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(w) != c.warnings {
				t.Errorf("warnings = %q, want %d", w, c.warnings)
			}
			if c.check != nil {
				c.check(t, r)
			}
		})
	}
}

func TestDecodeNamesTheField(t *testing.T) {
	var r LaunchRequest
	_, err := DecodeRequest(strings.NewReader(`{"need_inodes":"many"}`), &r)
	if err == nil || !strings.Contains(err.Error(), `"need_inodes"`) {
		t.Fatalf("error %v does not name the field", err)
	}
}

func TestParseSize(t *testing.T) {
	good := map[string]Size{"0": 0, "512MiB": 512 << 20, "1.5GiB": 3 << 29, "10MB": 10e6, "1k": 1024, " 7 B ": 7, "2TiB": 2 << 40}
	for in, want := range good {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "GiB", "1.5.5MiB", "NaN", "Inf", "0x10", "1e30GiB", "5%"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) accepted", in)
		}
	}
}

func TestCodes(t *testing.T) {
	want := map[Code][2]int{
		CodeBadRequest: {400, 64}, CodeForbidden: {403, 77}, CodeNotFound: {404, 78},
		CodeMethodNotAllowed: {405, 64}, CodePayloadTooLarge: {413, 64}, CodeReplaceSandbox: {507, 10},
		CodeDiskFull: {507, 73}, CodeInodesExhausted: {507, 73}, CodeMountUnavailable: {503, 75},
		CodeBusy: {503, 75}, CodeInternal: {500, 70}, CodeFilesystemUnavailable: {503, 75},
	}
	for c, w := range want {
		if c.Status() != w[0] || c.ExitCode() != w[1] {
			t.Errorf("%s: status %d exit %d, want %v", c, c.Status(), c.ExitCode(), w)
		}
	}
	if !(CodeNotFound.Precedence() < CodeReplaceSandbox.Precedence() &&
		CodeReplaceSandbox.Precedence() < CodeDiskFull.Precedence() &&
		CodeDiskFull.Precedence() < CodeInodesExhausted.Precedence() &&
		CodeInodesExhausted.Precedence() < CodeMountUnavailable.Precedence() &&
		CodeMountUnavailable.Precedence() < CodeFilesystemUnavailable.Precedence() &&
		CodeFilesystemUnavailable.Precedence() < CodeBusy.Precedence()) {
		t.Error("precedence does not follow CONTRACT §3")
	}
}

// FuzzDecodeRequest: no body may panic the decoder, and an accepted body decodes to
// values within range.
func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{``, `{}`, `null`, `{"site":"a","need_bytes":"1GiB","need_inodes":3,"mounts":["m"],"deadline":"2s"}`,
		`{"need_bytes":1e400}`, `{"deadline":-5}`, `{"dry_run":true,"target_free":"2GiB","release_reserve":true}`,
		`{"a":{"b":[1,2,{"c":null}]}}`, "{\"site\":\"\\u0000\\ud800\"}", `{"need_bytes":"9223372036854775807"}`,
		`{"id":"a1b2","pid":4242,"ttl":"3m","max_lifetime":"15m","grace":"10s","site":"aura-bg","labels":{"turn":"17"}}`,
		`{"pid":-1,"ttl":"-1s"}`, `{"extend":"2m"}`, `{"labels":{"a":1}}`,
		`{"name":"agent-s17","path":"/srv/s17","required":true,"job":"a1b2","probe_interval":"-1s","links":[{"path":"/a","target":"/b"}],"credential_expires_at":"2026-12-01T10:15:00Z"}`,
		`{"expires_at":"9999-12-31T23:59:59Z"}`, `{"expires_at":"garbage"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var l LaunchRequest
		if _, err := DecodeRequest(bytes.NewReader(body), &l); err == nil {
			if l.NeedBytes != nil && *l.NeedBytes < 0 {
				t.Fatalf("negative need_bytes accepted from %q", body)
			}
			if l.Deadline != nil && *l.Deadline < 0 {
				t.Fatalf("negative deadline accepted from %q", body)
			}
		}
		var r ReclaimRequest
		DecodeRequest(bytes.NewReader(body), &r)
		var rs ResumeRequest
		DecodeRequest(bytes.NewReader(body), &rs)
		var j JobRequest
		if _, err := DecodeRequest(bytes.NewReader(body), &j); err == nil {
			for _, d := range []*Duration{j.TTL, j.MaxLifetime, j.Grace} {
				if d != nil && *d < 0 {
					t.Fatalf("negative duration accepted in a job request from %q", body)
				}
			}
		}
		var hb HeartbeatRequest
		if _, err := DecodeRequest(bytes.NewReader(body), &hb); err == nil && hb.Extend != nil && *hb.Extend < 0 {
			t.Fatalf("negative extend accepted from %q", body)
		}
		// The runtime-mount bodies (v1.1) go through the same decoder.
		var mr MountRegistration
		if _, err := DecodeRequest(bytes.NewReader(body), &mr); err == nil {
			for _, d := range []*Duration{mr.ProbeInterval, mr.ProbeTimeout} {
				if d != nil && *d < 0 {
					t.Fatalf("negative duration accepted in a mount registration from %q", body)
				}
			}
		}
		var cp CredentialPush
		DecodeRequest(bytes.NewReader(body), &cp)
	})
}

func TestFormatCount(t *testing.T) {
	for n, want := range map[uint64]string{0: "0", 999: "999", 1000: "1,000", 720896: "720,896", 16777216: "16,777,216"} {
		if got := FormatCount(n); got != want {
			t.Errorf("FormatCount(%d) = %q, want %q", n, got, want)
		}
	}
}

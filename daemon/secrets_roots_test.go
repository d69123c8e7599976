package daemon

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// TestNoSecretInTrailOrLog (issue 21 item 4): uid 65534 registers two mounts whose
// refresh_command prints an AWS credential_process document with a fake secret key and
// session token; one succeeds, one fails after printing them to stderr as well. The
// events (read by uid 65533, who is no writer) and the daemon's log hold neither secret,
// the success says "refreshed, expires at", and the failure keeps only its first stderr
// line, redacted.
func TestNoSecretInTrailOrLog(t *testing.T) {
	testenv.RequireRoot(t)
	const key, token, keyID = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzzFAKESECRET1", "IQoJb3JpZ2luX2VjFAKESESSIONTOKEN0123456789abcdef", "ASIAFAKEKEYID1234567"
	base, err := os.MkdirTemp("", "sandboxd-secrets-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	os.Chmod(base, 0o755)
	probe := filepath.Join(base, "probe.test")
	if b, err := os.ReadFile(os.Args[0]); err != nil || os.WriteFile(probe, b, 0o755) != nil {
		t.Fatalf("copy test binary: %v", err)
	}
	logs := &testenv.SyncBuffer{}
	td := startDaemon(t, noSites(t.TempDir()), func(o *Options) {
		o.ProbeCommand = []string{probe, "mount-probe"}
		o.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	td.d.cfgMu.Lock()
	td.d.writersV = Writers{UIDs: []uint32{attacker}}
	td.d.cfgMu.Unlock()

	doc := fmt.Sprintf(`{"Version": 1, "AccessKeyId": "%s", "SecretAccessKey": "%s", "SessionToken": "%s", "Expiration": "'"$(date -u -d '+1 hour' +%%Y-%%m-%%dT%%H:%%M:%%SZ)"'"}`, keyID, key, token)
	soon := time.Now().Add(2 * time.Second)
	for _, c := range []struct{ name, script string }{
		{"sec-ok", "echo '" + doc + "'"},
		{"sec-fail", "echo 'aws: error: SecretAccessKey=" + key + " token " + token + "' >&2; echo '" + doc + "'; exit 1"},
	} {
		mnt := filepath.Join(base, c.name)
		os.Mkdir(mnt, 0o755)
		os.Chown(mnt, attacker, attacker)
		req := fastReg(c.name, mnt)
		req.RefreshCommand = []string{"/bin/sh", "-c", c.script}
		req.CredentialExpiresAt = &soon
		b, _ := jsonString(req)
		if code, answer := requestAs(t, td, attacker, attacker, nil, "POST", "/v1/mounts", b); code != 201 {
			t.Fatalf("register %s: %d %s", c.name, code, answer)
		}
	}
	poll(t, time.Minute, "a refresh and a failed refresh", func() bool {
		return len(td.eventsWith(t, api.EventCredential, "credentials refreshed")) >= 1 &&
			len(td.eventsWith(t, api.EventCredential, "credential refresh failed")) >= 1
	})
	code, trail := requestAs(t, td, attacker-1, attacker-1, nil, "GET", "/v1/events", "")
	if code != 200 {
		t.Fatalf("GET /v1/events as a non-writer: %d", code)
	}
	for _, secret := range []string{key, token, keyID, "FAKESECRET", "FAKESESSIONTOKEN"} {
		if strings.Contains(trail, secret) {
			t.Errorf("the event trail holds the secret %q:\n%s", secret, trail)
		}
		if strings.Contains(logs.String(), secret) {
			t.Errorf("the log holds the secret %q:\n%s", secret, logs.String())
		}
	}
	if ok := td.eventsWith(t, api.EventCredential, "credentials refreshed"); !strings.Contains(ok[0].Message, "expires at") {
		t.Errorf("refresh event: %q, want it to say when the credential expires", ok[0].Message)
	}
	failed := td.eventsWith(t, api.EventCredential, "credential refresh failed")
	if _, m, _ := strings.Cut(failed[0].Message, "exit status 1: "); m != "aws: error: SecretAccessKey=[redacted] token [redacted]" {
		t.Errorf("failed refresh event: %q, want the first stderr line, redacted, and nothing of stdout", m)
	}
}

func jsonString(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}

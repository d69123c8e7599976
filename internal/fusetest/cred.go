package fusetest

import (
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// WriteCred writes a credential file that expires at exp, atomically (temp file and
// rename), as a credential helper would.
func WriteCred(path string, exp time.Time) error {
	tmp := path + ".tmp"
	b := fmt.Sprintf(`{"AccessKeyId":"test","Expiration":%q}`, exp.UTC().Format(time.RFC3339Nano))
	if err := os.WriteFile(tmp, []byte(b), 0o644); err != nil {
		return fmt.Errorf("write credential %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil { // by path: test support, never linked into sandboxd
		return fmt.Errorf("write credential %s: %w", path, err)
	}
	return nil
}

// CredExpiration reads the Expiration of a credential file.
func CredExpiration(path string) (time.Time, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return time.Time{}, err
	}
	var d struct{ Expiration string }
	if err := json.Unmarshal(b, &d); err != nil {
		return time.Time{}, fmt.Errorf("credential %s: %w", path, err)
	}
	t, err := time.Parse(time.RFC3339Nano, d.Expiration)
	if err != nil {
		return time.Time{}, fmt.Errorf("credential %s: Expiration: %w", path, err)
	}
	return t, nil
}

// RefreshCommand is a shell command that rewrites path to expire ttl from now (whole
// seconds), for a refresh_command: what a credential helper does.
func RefreshCommand(path string, ttl time.Duration) []string {
	secs := int(ttl / time.Second)
	if secs < 1 {
		secs = 1
	}
	return []string{"/bin/sh", "-c", fmt.Sprintf(
		`printf '{"Expiration":"%%s"}' "$(date -u -d '+%d seconds' +%%Y-%%m-%%dT%%H:%%M:%%SZ)" > %s.tmp && mv %s.tmp %s`,
		secs, path, path, path)}
}

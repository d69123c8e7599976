package reclaim

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// TestNoSecretFromCommandOutput (issue 21 item 4, reclaim's part): root's configured gc
// commands print an AWS credential document with a fake secret key, session token and
// key id — one fails after printing them to stderr too, one succeeds. The reclaim's
// events, its log, and its run (actions and detail, as the API answers them) hold none
// of the three: the failure's output passes through the same redaction as a mount's
// refresh output, and still says why the tool failed.
func TestNoSecretFromCommandOutput(t *testing.T) {
	const key, token, keyID = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzzFAKESECRET1", "IQoJb3JpZ2luX2VjFAKESESSIONTOKEN0123456789abcdef", "ASIAFAKEKEYID1234567"
	e := newEnv(t, 128*mib, 0)
	bin := t.TempDir()
	doc := `{"Version": 1, "AccessKeyId": "` + keyID + `", "SecretAccessKey": "` + key + `", "SessionToken": "` + token + `"}`
	writeFileStr(t, filepath.Join(bin, "fail.sh"), "#!/bin/sh\necho 'registry login failed: SecretAccessKey="+key+" token "+token+"' >&2\necho '"+doc+"'\nexit 3\n")
	writeFileStr(t, filepath.Join(bin, "ok.sh"), "#!/bin/sh\necho '"+doc+"'\necho '"+doc+"' >&2\n")
	os.Chmod(filepath.Join(bin, "fail.sh"), 0o755)
	os.Chmod(filepath.Join(bin, "ok.sh"), 0o755)
	for _, n := range []string{"c1", "c2"} {
		for i := 0; i < 20; i++ {
			writeFile(t, filepath.Join(e.root, n, "e"+string(rune('a'+i))), mib, 5*time.Hour)
		}
	}
	e.fillTo(filepath.Join(e.home, "bulk.bin"), 40*mib)
	logs := &testenv.SyncBuffer{}
	o := e.options()
	o.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	o.Caches = []CacheConfig{
		{Name: "c1", Path: filepath.Join(e.root, "c1"), Command: []string{filepath.Join(bin, "fail.sh")}, Order: 1},
		{Name: "c2", Path: filepath.Join(e.root, "c2"), Command: []string{filepath.Join(bin, "ok.sh")}, Order: 2},
	}
	o.LookPath = onlyTools()
	r := e.newReclaimer(o)
	run, err := r.Reclaim(context.Background(), Request{Trigger: TriggerManual})
	if err != nil {
		t.Fatal(err)
	}
	var fail *api.Action
	for i, a := range run.Actions {
		if a.Kind == api.ActionCommand && strings.Contains(a.Path, "fail.sh") {
			fail = &run.Actions[i]
		}
	}
	if fail == nil || fail.Status != api.ActionFailed || !strings.Contains(fail.Error, "registry login failed") {
		t.Fatalf("the failing command's action: %+v; want failed, saying why", fail)
	}
	runJSON, _ := json.Marshal(run)
	e.mu.Lock()
	evJSON, _ := json.Marshal(e.events)
	nev := len(e.events)
	e.mu.Unlock()
	if !strings.Contains(string(evJSON), "fail.sh") || nev == 0 {
		t.Fatalf("no event of the commands: %s", evJSON)
	}
	for what, s := range map[string]string{"the events": string(evJSON), "the log": logs.String(), "the run": string(runJSON)} {
		for name, secret := range map[string]string{"secret key": key, "session token": token, "key id": keyID} {
			if strings.Contains(s, secret) {
				t.Errorf("%s hold the %s:\n%s", what, name, s)
			}
		}
	}
}

package daemon

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/fusetest"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// End-to-end proofs of issue 12 (runtime mounts) through a real daemon: mounts served by
// test FUSE servers (internal/fusetest) in child processes, registered, pushed to and
// released through the API only.

// register POSTs a registration and answers status and body.
func register(t testing.TB, td *testDaemon, req api.MountRegistration) (int, string) {
	t.Helper()
	b, _ := json.Marshal(req)
	code, _, body := td.do(t, "POST", "/v1/mounts", string(b))
	return code, body
}

// mustRegister registers and fails the test unless the answer is 201.
func mustRegister(t testing.TB, td *testDaemon, req api.MountRegistration) api.Mount {
	t.Helper()
	code, body := register(t, td, req)
	var m api.Mount
	if code != http.StatusCreated || json.Unmarshal([]byte(body), &m) != nil {
		t.Fatalf("register %s: %d %s", req.Name, code, body)
	}
	return m
}

func dur(d time.Duration) *api.Duration { v := api.Duration(d); return &v }
func ptr[T any](v T) *T                 { return &v }

// fastReg is a registration probing every 200 ms with a 2 s timeout.
func fastReg(name, path string) api.MountRegistration {
	return api.MountRegistration{Name: name, Path: path, ProbeInterval: dur(200 * time.Millisecond), ProbeTimeout: dur(2 * time.Second)}
}

// problemOf decodes a problem answer.
func problemOf(body string) api.Problem {
	var p api.Problem
	json.Unmarshal([]byte(body), &p)
	return p
}

// TestRegisteredMountRefreshNeverDenied: a registered mount whose credentials expire in
// 12 s, with a refresh_command that renews them at half their life: never denied, every
// launch naming it passes, the refreshes are events. (Half of 12 s leaves a loaded machine
// 6 s to run the refresh before the server denies.)
func TestRegisteredMountRefreshNeverDenied(t *testing.T) {
	testenv.RequireRoot(t)
	mnt := mountDir(t, "s17-agent")
	cred := filepath.Join(t.TempDir(), "cred.json")
	exp := time.Now().Add(12 * time.Second)
	if err := fusetest.WriteCred(cred, exp); err != nil {
		t.Fatal(err)
	}
	fusetest.Start(t, mnt, fusetest.Options{Credential: cred, Reload: true})
	td := startMountDaemon(t)
	req := fastReg("agent-s17", mnt)
	req.CredentialFile, req.RefreshCommand = cred, fusetest.RefreshCommand(cred, 12*time.Second)
	req.CredentialExpiresAt, req.RefreshAt = &exp, ptr(0.5)
	mustRegister(t, td, req)
	td.waitMountState(t, "agent-s17", api.MountHealthy)
	refused := 0
	poll(t, time.Minute, "two credential refreshes", func() bool {
		if code, p := launchMounts(t, td, "agent-s17"); code != 200 {
			refused++
			t.Logf("launch refused: %d %s %s", code, p.Code, p.Detail)
		}
		return len(td.eventsWith(t, api.EventCredential, "credentials refreshed")) >= 2
	})
	if refused > 0 {
		t.Errorf("%d launch calls refused while the credential was being refreshed", refused)
	}
	if ev := td.eventsWith(t, api.EventMountProbe, "denied"); len(ev) > 0 {
		t.Fatalf("the registered mount went denied despite the refresh: %s", ev[0].Message)
	}
	m := td.mount(t, "agent-s17")
	if !m.Registered || m.State != api.MountHealthy || m.CredentialExpiresAt == nil || !m.CredentialExpiresAt.After(exp) {
		t.Fatalf("mount after the refreshes: %+v (first expiry %v)", m, exp)
	}
}

// TestRegisteredMountCredentialExpired: the runner said the credential expires at T and
// nothing refreshes it; the FUSE server itself starts denying 10 s later. At T sandboxd
// raises MountUnavailable/CredentialExpired and refuses launches, while the mount still
// answers; then the first EACCES makes it denied, and the remount command restores it.
func TestRegisteredMountCredentialExpired(t *testing.T) {
	testenv.RequireRoot(t)
	mnt := mountDir(t, "s18-agent")
	serverCred := filepath.Join(t.TempDir(), "server-cred.json")
	// Seconds apart, not less: on a loaded machine the set-up must end before T, and the
	// test must see T's condition before the server denies.
	told := time.Now().Add(10 * time.Second)
	if err := fusetest.WriteCred(serverCred, told.Add(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	srv := fusetest.Start(t, mnt, fusetest.Options{Credential: serverCred})
	td := startMountDaemon(t)
	req := fastReg("agent-s18", mnt)
	req.CredentialExpiresAt = &told
	req.RemountCommand, req.MaxRemountsPerHour = srv.RemountCommand(time.Hour), ptr(20)
	mustRegister(t, td, req)
	td.waitMountState(t, "agent-s18", api.MountHealthy)

	var cond api.Condition
	poll(t, time.Minute, "the CredentialExpired condition", func() bool {
		for _, c := range td.d.healthNow().Conditions {
			if c.Type == api.CondMountUnavailable && c.Subject == "agent-s18" {
				cond = c
				return true
			}
		}
		return false
	})
	if cond.Reason != "CredentialExpired" {
		t.Fatalf("first condition of the mount: %+v, want reason CredentialExpired", cond)
	}
	if time.Now().After(told.Add(10 * time.Second)) {
		t.Fatalf("the condition came only after the server began denying")
	}
	if m := td.mount(t, "agent-s18"); m.State != api.MountHealthy {
		t.Fatalf("mount is %s before any EACCES: %+v", m.State, m)
	}
	code, p := launchMounts(t, td, "agent-s18")
	if code != http.StatusServiceUnavailable || p.Code != api.CodeMountUnavailable || !strings.Contains(p.Detail, "CredentialExpired") {
		t.Fatalf("launch with the credential expired: %d %s %q", code, p.Code, p.Detail)
	}
	t.Logf("refusal before any EACCES: %s", p.Detail)
	// Then the server denies, the mount goes denied, and the remount restores it.
	poll(t, time.Minute, "denied", func() bool { return len(td.eventsWith(t, api.EventMountProbe, "is denied: EACCES")) > 0 })
	m := td.waitMountState(t, "agent-s18", api.MountHealthy)
	waitRemountEventFor(t, td, "agent-s18", m)
	exp := td.eventsWith(t, api.EventCredential, "without a refresh (CredentialExpired)")
	den := td.eventsWith(t, api.EventMountProbe, "is denied: EACCES")
	if len(exp) == 0 || exp[0].Seq > den[0].Seq {
		t.Fatalf("the expiry event does not come before the first denial: %+v %+v", exp, den)
	}
	if m.CredentialExpiresAt != nil {
		t.Errorf("credential_expires_at = %v after the remount, want null (unknown until pushed)", m.CredentialExpiresAt)
	}
	if code, p := launchMounts(t, td, "agent-s18"); code != 200 {
		t.Fatalf("launch after the remount: %d %s", code, p.Detail)
	}
}

// waitRemountEventFor is waitRemountEvent for a mount of any name.
func waitRemountEventFor(t *testing.T, td *testDaemon, name string, m api.Mount) {
	t.Helper()
	if m.RemountsTotal < 1 {
		t.Fatalf("healthy without a remount? %+v", m)
	}
	poll(t, time.Minute, "the remount event", func() bool {
		return len(td.eventsWith(t, api.EventRemount, "remounted "+name)) > 0
	})
}

// TestRegisteredMountPushMovesRefresh: with refresh_at 0.5 the refresh of a 10 s credential
// is due 5 s in; a PUT of a 40 s expiry before that moves it to about 20 s after the push.
// (Seconds, not less: the push must come before the old refresh point on a loaded machine.)
// The refresh command prints the renewed expiry (credential_process JSON), as a runner's
// sign endpoint client would.
func TestRegisteredMountPushMovesRefresh(t *testing.T) {
	testenv.RequireRoot(t)
	mnt := mountDir(t, "s19-agent")
	fusetest.Start(t, mnt, fusetest.Options{})
	td := startMountDaemon(t)
	runs := filepath.Join(t.TempDir(), "runs")
	req := fastReg("agent-s19", mnt)
	req.CredentialExpiresAt = ptr(time.Now().Add(10 * time.Second))
	req.RefreshAt = ptr(0.5)
	req.RefreshCommand = []string{"/bin/sh", "-c", fmt.Sprintf(`date +%%s >> %s; printf '{"Version":1,"Expiration":"%%s"}\n' "$(date -u -d '+60 seconds' +%%Y-%%m-%%dT%%H:%%M:%%SZ)"`, runs)}
	mustRegister(t, td, req)
	pushed := time.Now().Add(40 * time.Second).Truncate(time.Second)
	b, _ := json.Marshal(api.CredentialPush{ExpiresAt: &pushed})
	pushAt := time.Now()
	code, _, body := td.do(t, "PUT", "/v1/mounts/agent-s19/credentials", string(b))
	var m api.Mount
	if code != 200 || json.Unmarshal([]byte(body), &m) != nil || m.CredentialExpiresAt == nil || !m.CredentialExpiresAt.Equal(pushed) {
		t.Fatalf("push: %d %s", code, body)
	}
	if len(td.eventsWith(t, api.EventCredential, "credentials pushed for mount agent-s19")) != 1 {
		t.Fatal("no event for the push")
	}
	time.Sleep(10 * time.Second) // past the old refresh point (5 s) and the old expiry (10 s)
	if _, err := os.Stat(runs); err == nil {
		t.Fatal("refresh_command ran at the old schedule after the push")
	}
	var refreshed []api.Event
	poll(t, time.Minute, "the refresh at the pushed schedule", func() bool {
		refreshed = td.eventsWith(t, api.EventCredential, "credentials refreshed")
		return len(refreshed) > 0
	})
	after := refreshed[0].Time.Sub(pushAt)
	// refresh_at 0.5 of ~40 s, minus up to 5% of jitter: due 19 s to 20 s after the push.
	// Never earlier (that would be the old schedule, or a lost push); a loaded machine may
	// run it late, so the upper bound only tells it from the pushed expiry (~40 s).
	if after < 18*time.Second || after > 32*time.Second {
		t.Fatalf("refresh %v after the push, want about 20 s (0.5 of the pushed lifetime)", after)
	}
	m = td.mount(t, "agent-s19")
	if m.CredentialExpiresAt == nil || time.Until(*m.CredentialExpiresAt) < 40*time.Second {
		t.Fatalf("expiry after the refresh: %v, want the one the command printed (+60 s)", m.CredentialExpiresAt)
	}
	if ev := td.eventsWith(t, api.EventMountProbe, "denied"); len(ev) > 0 {
		t.Fatalf("denied: %s", ev[0].Message)
	}
}

// serverGone reports whether the fusetest server process pid has exited.
func serverGone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && (s[i+2] == 'Z' || s[i+2] == 'X')
}

// fuseMountedAt reports whether a FUSE mount sits at path.
func fuseMountedAt(path string) bool {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 4 && f[4] == path {
			for i, x := range f {
				if x == "-" && i+1 < len(f) && strings.HasPrefix(f[i+1], "fuse") {
					return true
				}
			}
		}
	}
	return false
}

// TestRegisteredMountDeleteReleases: DELETE ?unmount=true of a registered mount with a
// link: the link is gone, the mount unmounted by `umount` (not lazily), the FUSE server
// exited, every step an event; the mount is no longer watched.
func TestRegisteredMountDeleteReleases(t *testing.T) {
	testenv.RequireRoot(t)
	session := t.TempDir()
	mnt := mountDir(t, "s20-agent")
	srv := fusetest.Start(t, mnt, fusetest.Options{})
	link := filepath.Join(session, "agent-files")
	td := startMountDaemon(t)
	req := fastReg("agent-s20", mnt)
	req.Links = []api.LinkSpec{{Path: link, Target: mnt}}
	mustRegister(t, td, req)
	td.waitMountState(t, "agent-s20", api.MountHealthy)
	poll(t, time.Minute, "the link built", func() bool { tgt, err := os.Readlink(link); return err == nil && tgt == mnt })
	os.WriteFile(filepath.Join(mnt, "work.txt"), []byte("kept"), 0o644)
	pid := srv.Pid()

	code, _, body := td.do(t, "DELETE", "/v1/mounts/agent-s20?unmount=true", "")
	var rel api.MountRelease
	if code != 200 || json.Unmarshal([]byte(body), &rel) != nil {
		t.Fatalf("delete: %d %s", code, body)
	}
	t.Logf("release: %s", body)
	if !rel.Unmounted || fuseMountedAt(mnt) {
		t.Fatalf("not unmounted: %+v", rel)
	}
	if _, err := os.Lstat(link); !os.IsNotExist(err) {
		t.Fatalf("link still there: %v", err)
	}
	last := rel.Steps[len(rel.Steps)-1]
	for _, s := range rel.Steps {
		if s.Step == "umount_lazy" || s.Step == "fusermount3" {
			t.Errorf("a plain umount should have been enough: %+v", rel.Steps)
		}
	}
	if last.Step != "umount" || last.Result != "done" {
		t.Errorf("last step %+v, want umount done", last)
	}
	poll(t, time.Minute, "the FUSE server to exit", func() bool { return serverGone(pid) })
	if b, err := os.ReadFile(filepath.Join(srv.Backing, "work.txt")); err != nil || string(b) != "kept" {
		t.Errorf("the session's file was not flushed to the backing store: %q %v", b, err)
	}
	if code, _, _ := td.do(t, "GET", "/v1/mounts/agent-s20", ""); code != 404 {
		t.Errorf("GET after the release: %d, want 404", code)
	}
	if code, p := launchMounts(t, td, "agent-s20"); code != 404 || !strings.Contains(p.Detail, "agent-s20") {
		t.Errorf("launch naming the released mount: %d %q, want 404 naming it", code, p.Detail)
	}
	for _, want := range []string{"release agent-s20: sync done", "release agent-s20: umount done", "released mount agent-s20"} {
		if len(td.eventsWith(t, api.EventMountRegistry, want)) == 0 {
			t.Errorf("no event %q", want)
		}
	}
}

// TestRegisteredMountsRestored: two registered mounts survive a restart of sandboxd (same
// state dir) and a reload of the config, and are watched again.
func TestRegisteredMountsRestored(t *testing.T) {
	testenv.RequireRoot(t)
	a, b := mountDir(t, "a"), mountDir(t, "b")
	fusetest.Start(t, a, fusetest.Options{})
	fusetest.Start(t, b, fusetest.Options{})
	td := startMountDaemon(t)
	exp := time.Now().Add(time.Hour).Truncate(time.Second)
	ra := fastReg("sess-a", a)
	ra.CredentialExpiresAt = &exp
	mustRegister(t, td, ra)
	mustRegister(t, td, fastReg("sess-b", b))
	td.waitMountState(t, "sess-a", api.MountHealthy)
	// A reload that rebuilds the components ([health] changed) keeps the registrations.
	cfgPath := filepath.Join(td.dir, "sandboxd.toml")
	text, _ := os.ReadFile(cfgPath)
	os.WriteFile(cfgPath, []byte(strings.Replace(string(text), `sample_interval = "100ms"`, `sample_interval = "200ms"`, 1)), 0o644)
	if err := td.d.Reload(); err != nil {
		t.Fatal(err)
	}
	if td.d.config().Health.SampleInterval != 200*time.Millisecond {
		t.Fatal("the reload did not apply the changed file")
	}
	for _, n := range []string{"sess-a", "sess-b"} {
		if m := td.waitMountState(t, n, api.MountHealthy); !m.Registered {
			t.Fatalf("after a reload: %+v", m)
		}
	}
	td2 := restartDaemon(t, td)
	for _, n := range []string{"sess-a", "sess-b"} {
		m := td2.waitMountState(t, n, api.MountHealthy)
		if !m.Registered {
			t.Errorf("%s restored but not marked registered", n)
		}
	}
	if m := td2.mount(t, "sess-a"); m.CredentialExpiresAt == nil || !m.CredentialExpiresAt.Equal(exp) {
		t.Errorf("credential expiry after the restart: %v, want %v", m.CredentialExpiresAt, exp)
	}
}

// restartDaemon stops td and starts a new daemon on the same config, socket and state dir.
func restartDaemon(t *testing.T, td *testDaemon) *testDaemon {
	t.Helper()
	stopNow(td)
	text, err := os.ReadFile(filepath.Join(td.dir, "sandboxd.toml"))
	if err != nil {
		t.Fatal(err)
	}
	return startDaemonIn(t, td.dir, string(text), probeSelf)
}

// TestRegisteredMountLaunchRefusals: a launch naming an unknown mount is 404 naming it; a
// required registered mount that hangs refuses launches with 503 mount_unavailable naming
// state, errno and since.
func TestRegisteredMountLaunchRefusals(t *testing.T) {
	testenv.RequireRoot(t)
	mnt := mountDir(t, "s21-agent")
	srv := fusetest.Start(t, mnt, fusetest.Options{})
	td := startMountDaemon(t)
	code, p := launchMounts(t, td, "agent-nope")
	if code != 404 || p.Code != api.CodeNotFound || !strings.Contains(p.Detail, "agent-nope") {
		t.Fatalf("launch naming an unknown mount: %d %s %q", code, p.Code, p.Detail)
	}
	req := fastReg("agent-s21", mnt)
	req.ProbeTimeout = dur(time.Second)
	req.Required = ptr(true) // registered mounts default to not required: asked for here
	mustRegister(t, td, req)
	td.waitMountState(t, "agent-s21", api.MountHealthy)
	srv.Hang()
	checkRefusal(t, td, "agent-s21", mnt, api.MountHung)
	// Required: a launch that does not name it is refused too.
	if code, p := launchMounts(t, td); code != http.StatusServiceUnavailable || !strings.Contains(p.Detail, "agent-s21") {
		t.Fatalf("launch naming nothing while a required registered mount hangs: %d %q", code, p.Detail)
	}
}

// TestRegisterBadInput: every refusal has its status and a detail naming the field.
func TestRegisterBadInput(t *testing.T) {
	testenv.RequireRoot(t)
	configured := mountDir(t, "configured")
	fusetest.Start(t, configured, fusetest.Options{})
	td := startMountDaemon(t, mountSpec{name: "conf", path: configured, interval: time.Second, timeout: 2 * time.Second})
	bare := mountDir(t, "bare")
	// Paths that resolve to "/" or beneath the kernel's trees, and paths reached through a
	// symlink (QA: only a literal "/" used to be refused).
	links := t.TempDir()
	rootLink, dirLink := filepath.Join(links, "rootlink"), filepath.Join(links, "dirlink")
	if err := os.Symlink("/", rootLink); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Dir(bare), dirLink); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		req  api.MountRegistration
		code int
		want string
	}{
		{"relative path", api.MountRegistration{Name: "x", Path: "srv/x"}, 400, `"path"`},
		{"root", api.MountRegistration{Name: "x", Path: "/"}, 400, "root directory"},
		{"protected", api.MountRegistration{Name: "x", Path: "/home"}, 400, "protected path"},
		{"/proc/self/root", api.MountRegistration{Name: "x", Path: "/proc/self/root"}, 400, "/proc"},
		{"under /sys", api.MountRegistration{Name: "x", Path: "/sys/fs/x"}, 400, "/sys"},
		{"symlink to /", api.MountRegistration{Name: "x", Path: rootLink}, 400, rootLink + " is a symlink"},
		{"through a symlinked dir", api.MountRegistration{Name: "x", Path: dirLink + "/bare"}, 400, dirLink + " is a symlink"},
		{"link through a symlinked dir", api.MountRegistration{Name: "x", Path: bare, Links: []api.LinkSpec{{Path: dirLink + "/agent-files", Target: bare}}}, 400, "links[0].path"},
		{"link in /proc", api.MountRegistration{Name: "x", Path: bare, Links: []api.LinkSpec{{Path: "/proc/self/cwd/agent-files", Target: bare}}}, 400, "/proc"},
		{"link on /", api.MountRegistration{Name: "x", Path: bare, Links: []api.LinkSpec{{Path: "/", Target: bare}}}, 400, "links[0].path"},
		{"bad name", api.MountRegistration{Name: "../x", Path: bare}, 400, `"name"`},
		{"link inside", api.MountRegistration{Name: "x", Path: bare, Links: []api.LinkSpec{{Path: bare + "/l", Target: bare}}}, 400, "links[0].path"},
		{"refresh_at", api.MountRegistration{Name: "x", Path: bare, RefreshAt: ptr(1.5)}, 400, "refresh_at"},
		{"expiry before 1970", api.MountRegistration{Name: "x", Path: bare, CredentialExpiresAt: ptr(time.Time{})}, 400, "credential_expires_at"},
		{"expiry in 1969", api.MountRegistration{Name: "x", Path: bare, CredentialExpiresAt: ptr(time.Unix(-1, 0))}, 400, "credential_expires_at"},
		{"configured name", api.MountRegistration{Name: "conf", Path: bare}, 409, "conf"},
		{"configured path", api.MountRegistration{Name: "x", Path: configured}, 409, configured},
		{"job that does not run", api.MountRegistration{Name: "x", Path: bare, Job: "a1b2"}, 404, "a1b2"},
	}
	for _, c := range cases {
		code, body := register(t, td, c.req)
		p := problemOf(body)
		if code != c.code || !strings.Contains(p.Detail, c.want) {
			t.Errorf("%s: %d %q, want %d naming %s", c.name, code, p.Detail, c.code, c.want)
		}
	}
	// Not a mount point: registered, missing, launches naming it refused.
	m := mustRegister(t, td, api.MountRegistration{Name: "bare", Path: bare, Required: ptr(false)})
	if m.State != api.MountMissing {
		t.Errorf("registered bare dir: %+v", m)
	}
	if code, body := register(t, td, api.MountRegistration{Name: "bare", Path: mountDir(t, "other")}); code != 409 {
		t.Errorf("duplicate name: %d %s", code, body)
	}
	td.waitMountState(t, "bare", api.MountMissing)
	if code, p := launchMounts(t, td, "bare"); code != 503 || !strings.Contains(p.Detail, "bare") || !strings.Contains(p.Detail, "missing") {
		t.Errorf("launch naming a registered non-mount: %d %q", code, p.Detail)
	}
	// Registered without "required": not required, so one session's missing mount does not
	// refuse the launches of every other session on the host.
	other := mustRegister(t, td, api.MountRegistration{Name: "bare2", Path: mountDir(t, "bare2")})
	if other.Required {
		t.Errorf("a mount registered without \"required\" is required: %+v", other)
	}
	td.waitMountState(t, "bare2", api.MountMissing)
	// The configured mount is required: a launch before its first probe is refused
	// ("has not been probed yet"), rightly; what is asked here is the registered ones.
	td.waitMountState(t, "conf", api.MountHealthy)
	if code, p := launchMounts(t, td); code != 200 {
		t.Errorf("launch naming no mount while registered mounts are missing: %d %q", code, p.Detail)
	}
	// Configured mounts cannot be removed through the API; unknown ones are 404.
	if code, _, body := td.do(t, "DELETE", "/v1/mounts/conf", ""); code != 403 || !strings.Contains(problemOf(body).Detail, "configured") {
		t.Errorf("DELETE of a configured mount: %d %s", code, body)
	}
	if code, _, _ := td.do(t, "DELETE", "/v1/mounts/nope", ""); code != 404 {
		t.Errorf("DELETE of an unknown mount: %d", code)
	}
	if code, _, body := td.do(t, "PUT", "/v1/mounts/bare/credentials", `{"expires_at":"2001-01-01T00:00:00Z"}`); code != 400 {
		t.Errorf("push of a past expiry: %d %s", code, body)
	}
	if code, _, body := td.do(t, "PUT", "/v1/mounts/bare/credentials", `{"expires_at":"9999-12-31T23:59:59Z"}`); code != 200 || !strings.Contains(body, "9999-12-31") {
		t.Errorf("push of the last second of 9999 (far, not absurd): %d %s", code, body)
	}
	if code, _, body := td.do(t, "PUT", "/v1/mounts/bare/credentials", `{}`); code != 400 || !strings.Contains(body, "expires_at") {
		t.Errorf("push without expires_at: %d %s", code, body)
	}
	if code, _, _ := td.do(t, "PUT", "/v1/mounts/nope/credentials", `{"expires_at":"2099-01-01T00:00:00Z"}`); code != 404 {
		t.Errorf("push to an unknown mount: %d", code)
	}
	if code, _, body := td.do(t, "DELETE", "/v1/mounts/bare?unmount=maybe", ""); code != 400 {
		t.Errorf("DELETE ?unmount=maybe: %d %s", code, body)
	}
	// A peer that is not a writer.
	if got, _ := requestAs(t, td, 65534, 65534, nil, "POST", "/v1/mounts", "{}"); got != 403 {
		t.Errorf("POST /v1/mounts as uid 65534: %d, want 403", got)
	}
	if got, _ := requestAs(t, td, 65534, 65534, nil, "DELETE", "/v1/mounts/bare", ""); got != 403 {
		t.Errorf("DELETE as uid 65534: %d, want 403", got)
	}
	if got, _ := requestAs(t, td, 65534, 65534, nil, "GET", "/v1/mounts", ""); got != 200 {
		t.Errorf("GET /v1/mounts as uid 65534: %d, want 200", got)
	}
	if !contains(td.status(t).Features, api.FeatureRuntimeMounts) {
		t.Error("features do not list runtime_mounts")
	}
}

// TestRegisterThousand: 1,000 registrations against [mounts] max_registered (default 256):
// 256 are accepted, the rest refused with 409 naming the key, and the daemon's heap does
// not grow with the refused ones.
func TestRegisterThousand(t *testing.T) {
	testenv.RequireRoot(t)
	td := startMountDaemon(t)
	base := t.TempDir()
	accepted, refused := 0, 0
	var heap []uint64
	for i := 0; i < 1000; i++ {
		code, body := register(t, td, api.MountRegistration{Name: fmt.Sprintf("s%d", i), Path: filepath.Join(base, strconv.Itoa(i)), Required: ptr(false)})
		switch code {
		case 201:
			accepted++
		case 409:
			refused++
			if !strings.Contains(problemOf(body).Detail, "max_registered") {
				t.Fatalf("refusal %d: %s", i, body)
			}
		default:
			t.Fatalf("registration %d: %d %s", i, code, body)
		}
		if i == 300 || i == 999 {
			heap = append(heap, heapInUse())
		}
	}
	if accepted != 256 || refused != 744 {
		t.Fatalf("accepted %d, refused %d; want 256 and 744", accepted, refused)
	}
	var l api.MountList
	_, _, body := td.do(t, "GET", "/v1/mounts", "")
	if json.Unmarshal([]byte(body), &l) != nil || l.Registered != 256 || len(l.Mounts) != 256 || l.MaxRegistered != 256 {
		t.Fatalf("list: registered %d, %d mounts, max %d", l.Registered, len(l.Mounts), l.MaxRegistered)
	}
	t.Logf("heap in use after 300 registrations: %d KiB; after 1,000: %d KiB", heap[0]>>10, heap[1]>>10)
	if heap[1] > heap[0]+16<<20 {
		t.Errorf("heap grew by %d KiB over 700 refused registrations", (heap[1]-heap[0])>>10)
	}
	// Releasing frees the slots again.
	if code, _, body := td.do(t, "DELETE", "/v1/mounts/s0", ""); code != 200 {
		t.Fatalf("delete: %d %s", code, body)
	}
	if code, body := register(t, td, api.MountRegistration{Name: "again", Path: filepath.Join(base, "again"), Required: ptr(false)}); code != 201 {
		t.Fatalf("register after a release: %d %s", code, body)
	}
}

// heapInUse is the heap in use after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

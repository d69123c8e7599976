package daemon

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/fusetest"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// Adversarial proofs that a registered mount never does more than the peer who registered
// it could do itself (the review of issue 12: POST /v1/mounts is open to every writer, and
// the mount's commands and links used to run as root). uid 65534 is a writer through
// [server] writers and talks to the daemon over its socket from a child process.

const attacker = 65534

// registrantFixture is a daemon with uid 65534 as a writer, and a directory tree under a
// root-owned 0755 base: own/ (65534's, for its mount paths, links and command output),
// etc/ (root's 0755), sticky/ (root's 1777, as /tmp).
type registrantFixture struct {
	td                *testDaemon
	base, own, etc, s string
}

func newRegistrantFixture(t *testing.T) registrantFixture {
	t.Helper()
	testenv.RequireRoot(t)
	base, err := os.MkdirTemp("", "sandboxd-registrant-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	os.Chmod(base, 0o755)
	f := registrantFixture{base: base, own: filepath.Join(base, "own"), etc: filepath.Join(base, "etc"), s: filepath.Join(base, "sticky")}
	for _, d := range []string{f.own, f.etc, f.s} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.Chown(f.own, attacker, attacker)
	os.Chmod(f.s, 0o777|os.ModeSticky)
	// The probe children of 65534's mounts exec this binary: the build dir is 0700.
	probe := filepath.Join(base, "probe.test")
	if b, err := os.ReadFile(os.Args[0]); err != nil || os.WriteFile(probe, b, 0o755) != nil {
		t.Fatalf("copy test binary: %v", err)
	}
	f.td = startDaemon(t, noSites(t.TempDir()), func(o *Options) { o.ProbeCommand = []string{probe, "mount-probe"} })
	f.td.d.cfgMu.Lock()
	f.td.d.writersV = Writers{UIDs: []uint32{attacker, attacker - 1}}
	f.td.d.cfgMu.Unlock()
	t.Cleanup(func() {
		if t.Failed() {
			for _, e := range f.td.events(t) {
				t.Logf("event %s %s %s: %s", e.Time.Format("15:04:05.000"), e.Kind, e.Subject, e.Message)
			}
		}
	})
	return f
}

// dirOf makes dir (owned by uid) and answers it.
func dirOf(t *testing.T, dir string, uid int) string {
	t.Helper()
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chown(dir, uid, uid)
	return dir
}

// registerAs POSTs req as uid 65534 with supplementary group 4242.
func (f registrantFixture) registerAs(t *testing.T, uid uint32, req api.MountRegistration) (int, string) {
	t.Helper()
	b, _ := json.Marshal(req)
	return requestAs(t, f.td, uid, uid, []uint32{4242}, "POST", "/v1/mounts", string(b))
}

func ownerOf(t *testing.T, path string) int {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatalf("lstat %s: %v", path, err)
	}
	return int(fi.Sys().(*syscall.Stat_t).Uid)
}

// TestRegisteredMountActsAsItsRegistrant: the refresh and remount commands of 65534's
// mount run as 65534 with the groups of its connection (not root's), its link is made by
// 65534, the mount object and the state file name the registrant, and another writer may
// not release it.
func TestRegisteredMountActsAsItsRegistrant(t *testing.T) {
	f := newRegistrantFixture(t)
	mnt := dirOf(t, filepath.Join(f.own, "s1-agent"), attacker) // bare: missing, so remounted
	session := dirOf(t, filepath.Join(f.own, "s1"), attacker)
	out := dirOf(t, filepath.Join(f.own, "out"), attacker)
	link := filepath.Join(session, "agent-files")
	exp := time.Now().Add(2 * time.Second)
	renewed := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	req := fastReg("agent-s1", mnt)
	req.Required = ptr(false)
	req.CredentialExpiresAt = &exp
	req.RefreshCommand = []string{"/bin/sh", "-c", `id -u > ` + out + `/refresh; id -G >> ` + out + `/refresh; echo '{"Expiration":"` + renewed + `"}'`}
	// It fails on purpose after recording who ran it: there is no FUSE server to start.
	req.RemountCommand = []string{"/bin/sh", "-c", "id -u > " + out + "/remount; id -G >> " + out + "/remount; exit 1"}
	req.Links = []api.LinkSpec{{Path: link, Target: mnt}}
	code, body := f.registerAs(t, attacker, req)
	var m api.Mount
	if code != http.StatusCreated || json.Unmarshal([]byte(body), &m) != nil {
		t.Fatalf("register as %d: %d %s", attacker, code, body)
	}
	if m.RegisteredBy == nil || m.RegisteredBy.UID != attacker || m.RegisteredBy.GID != attacker || !contains32(m.RegisteredBy.Groups, 4242) {
		t.Fatalf("registered_by = %+v, want uid/gid %d with group 4242", m.RegisteredBy, attacker)
	}
	for _, which := range []string{"refresh", "remount"} {
		file := filepath.Join(out, which)
		var got string
		poll(t, time.Minute, "the "+which+" command to run", func() bool {
			b, err := os.ReadFile(file)
			got = string(b)
			return err == nil && strings.Count(got, "\n") >= 2
		})
		lines := strings.Split(strings.TrimSpace(got), "\n")
		if lines[0] != "65534" {
			t.Errorf("%s_command ran as uid %q, want 65534", which, lines[0])
		}
		groups := strings.Fields(lines[1])
		if !contains(groups, "4242") || contains(groups, "0") {
			t.Errorf("%s_command ran with groups %v, want 65534's connection's (4242), never root's 0", which, groups)
		}
		if uid := ownerOf(t, file); uid != attacker {
			t.Errorf("%s wrote a file owned by uid %d", which, uid)
		}
	}
	poll(t, time.Minute, "the link", func() bool { tgt, err := os.Readlink(link); return err == nil && tgt == mnt })
	if uid := ownerOf(t, link); uid != attacker {
		t.Errorf("the link was made by uid %d, want 65534 (with its rights)", uid)
	}
	b, err := os.ReadFile(filepath.Join(f.td.d.config().Server.StateDir, mountsStateDoc))
	if err != nil || !strings.Contains(string(b), `"registered_by":{"uid":65534`) {
		t.Errorf("state file does not keep the registrant: %v %s", err, b)
	}
	// Another writer may neither release it nor push its credentials.
	if code, body := requestAs(t, f.td, attacker-1, attacker-1, nil, "DELETE", "/v1/mounts/agent-s1", ""); code != 403 || !strings.Contains(problemOf(body).Detail, "uid 65534") {
		t.Errorf("DELETE by another writer: %d %s, want 403 naming the registrant", code, body)
	}
	if code, body := requestAs(t, f.td, attacker-1, attacker-1, nil, "PUT", "/v1/mounts/agent-s1/credentials", `{"expires_at":"2099-01-01T00:00:00Z"}`); code != 403 {
		t.Errorf("PUT credentials by another writer: %d %s, want 403", code, body)
	}
	if code, body := requestAs(t, f.td, attacker, attacker, nil, "DELETE", "/v1/mounts/agent-s1", ""); code != 200 {
		t.Fatalf("DELETE by its registrant: %d %s", code, body)
	}
	if _, err := os.Lstat(link); !os.IsNotExist(err) {
		t.Errorf("the registrant's release left its link: %v", err)
	}
}

// TestRegisteredMountRefusesWhatTheRegistrantCannotDo: links in a root-owned directory, a
// root-owned symlink in a sticky directory, a mount path that is not 65534's, a
// remount_unit and the guard are refused with 403 naming the path and why, and nothing is
// created; a link that root replaced after the registration is not removed by the
// release. Root registering the same things still works.
func TestRegisteredMountRefusesWhatTheRegistrantCannotDo(t *testing.T) {
	f := newRegistrantFixture(t)
	mnt := dirOf(t, filepath.Join(f.own, "s2-agent"), attacker)
	rootLink := filepath.Join(f.s, "root-link")
	if err := os.Symlink(mnt, rootLink); err != nil {
		t.Fatal(err)
	}
	rootDir := dirOf(t, filepath.Join(f.base, "rootdir"), 0)
	cases := []struct {
		name string
		req  api.MountRegistration
		want []string
	}{
		{"link under a root-owned dir", api.MountRegistration{Name: "x1", Path: mnt, Links: []api.LinkSpec{{Path: filepath.Join(f.etc, "evil"), Target: "/"}}},
			[]string{f.etc, "not writable by uid 65534", "mode 0755"}},
		{"root's symlink in a sticky dir", api.MountRegistration{Name: "x2", Path: mnt, Links: []api.LinkSpec{{Path: rootLink, Target: mnt}}},
			[]string{rootLink, "sticky", "belongs to uid 0"}},
		{"link in a dir 65534 cannot reach", api.MountRegistration{Name: "x3", Path: mnt, Links: []api.LinkSpec{{Path: "/root/.ssh/x", Target: mnt}}},
			[]string{"/root"}},
		{"root's directory as the mount path", api.MountRegistration{Name: "x4", Path: rootDir}, []string{rootDir, "owned by uid 0", f.base}},
		{"a new mount path in root's directory", api.MountRegistration{Name: "x5", Path: filepath.Join(f.etc, "new")}, []string{f.etc, "not writable"}},
		{"remount_unit", api.MountRegistration{Name: "x6", Path: mnt, RemountUnit: "ssh.service"}, []string{"remount_unit", "root"}},
		{"guard", api.MountRegistration{Name: "x7", Path: mnt, Guard: ptr(true)}, []string{"guard"}},
	}
	for _, c := range cases {
		code, body := f.registerAs(t, attacker, c.req)
		p := problemOf(body)
		if code != 403 || p.Code != api.CodeForbidden {
			t.Errorf("%s: %d %s, want 403 forbidden", c.name, code, body)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(p.Detail, w) {
				t.Errorf("%s: detail %q does not say %q", c.name, p.Detail, w)
			}
		}
	}
	if _, err := os.Lstat(filepath.Join(f.etc, "evil")); !os.IsNotExist(err) {
		t.Errorf("a link was created under the root-owned dir: %v", err)
	}
	if tgt, err := os.Readlink(rootLink); err != nil || tgt != mnt || ownerOf(t, rootLink) != 0 {
		t.Errorf("root's symlink changed: %q %v", tgt, err)
	}
	if code, _, body := f.td.do(t, "GET", "/v1/mounts", ""); code != 200 || strings.Contains(body, `"x`) {
		t.Errorf("a refused registration is listed: %s", body)
	}

	// Allowed in the sticky dir; root then puts its own symlink there: the release, with
	// 65534's rights, cannot remove it (EPERM by the sticky bit).
	link := filepath.Join(f.s, "l3")
	req := fastReg("agent-s3", mnt)
	req.Required = ptr(false)
	req.Links = []api.LinkSpec{{Path: link, Target: mnt}}
	if code, body := f.registerAs(t, attacker, req); code != 201 {
		t.Fatalf("register a link in a sticky dir: %d %s", code, body)
	}
	poll(t, time.Minute, "the link", func() bool { _, err := os.Readlink(link); return err == nil })
	if uid := ownerOf(t, link); uid != attacker {
		t.Fatalf("link owned by %d", uid)
	}
	os.Remove(link)
	if err := os.Symlink(mnt, link); err != nil {
		t.Fatal(err)
	}
	code, body := requestAs(t, f.td, attacker, attacker, nil, "DELETE", "/v1/mounts/agent-s3", "")
	var rel api.MountRelease
	if code != 200 || json.Unmarshal([]byte(body), &rel) != nil {
		t.Fatalf("DELETE: %d %s", code, body)
	}
	if tgt, err := os.Readlink(link); err != nil || tgt != mnt || ownerOf(t, link) != 0 {
		t.Errorf("root's symlink was removed by 65534's release: %q %v", tgt, err)
	}
	if len(rel.Steps) == 0 || rel.Steps[0].Step != "links" || rel.Steps[0].Result != "failed" || !strings.Contains(rel.Steps[0].Detail, "not permitted") {
		t.Errorf("release steps %+v, want links failed with EPERM", rel.Steps)
	}

	// Root registering the very link 65534 was refused still works, as before.
	req = fastReg("agent-root", mnt)
	req.Required = ptr(false)
	req.Links = []api.LinkSpec{{Path: filepath.Join(f.etc, "agent-files"), Target: mnt}}
	m := mustRegister(t, f.td, req)
	if m.RegisteredBy == nil || m.RegisteredBy.UID != 0 {
		t.Errorf("root's registration: registered_by %+v", m.RegisteredBy)
	}
	poll(t, time.Minute, "root's link", func() bool { _, err := os.Readlink(filepath.Join(f.etc, "agent-files")); return err == nil })
}

// TestRegistrantCannotUnmountAnothersMount: 65534 may register a path in its own directory
// on which root mounted a FUSE filesystem, but its release takes only the steps 65534 could
// take (fusermount3 as 65534, which refuses another's mount): umount and umount -l are
// skipped as root-only, and the mount stays.
func TestRegistrantCannotUnmountAnothersMount(t *testing.T) {
	f := newRegistrantFixture(t)
	mnt := filepath.Join(dirOf(t, filepath.Join(f.own, "u"), attacker), "mnt")
	dirOf(t, mnt, 0)
	fusetest.Start(t, mnt, fusetest.Options{})
	req := fastReg("agent-u", mnt)
	req.Required, req.Unmount = ptr(false), ptr(true)
	if code, body := f.registerAs(t, attacker, req); code != 201 {
		t.Fatalf("register: %d %s", code, body)
	}
	code, body := requestAs(t, f.td, attacker, attacker, nil, "DELETE", "/v1/mounts/agent-u?unmount=true", "")
	var rel api.MountRelease
	if code != 200 || json.Unmarshal([]byte(body), &rel) != nil {
		t.Fatalf("DELETE: %d %s", code, body)
	}
	t.Logf("release: %s", body)
	if rel.Unmounted || !fuseMountedAt(mnt) {
		t.Fatalf("65534's release unmounted root's FUSE mount: %+v", rel)
	}
	results := map[string]ReleaseStepView{}
	for _, s := range rel.Steps {
		results[s.Step] = ReleaseStepView{s.Result, s.Detail}
	}
	for _, step := range []string{"umount", "umount_lazy"} {
		if r := results[step]; r.Result != "skipped" || !strings.Contains(r.Detail, "root-only") {
			t.Errorf("step %s: %+v, want skipped as root-only", step, r)
		}
	}
	if r := results["fusermount3"]; r.Result != "failed" {
		t.Errorf("step fusermount3: %+v, want failed (as 65534, another's mount)", r)
	}
}

// ReleaseStepView is one release step's result and detail.
type ReleaseStepView struct{ Result, Detail string }

func contains32(s []uint32, v uint32) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestRegistrantReleasesItsOwnFUSEMount: 65534's own FUSE mount (user_id=65534, no
// allow_other), in a directory root owns, is registered by 65534, probed healthy as 65534,
// and released by fusermount3 -u as 65534: unmounted, the FUSE server gone, umount skipped
// as root-only.
func TestRegistrantReleasesItsOwnFUSEMount(t *testing.T) {
	f := newRegistrantFixture(t)
	mnt := dirOf(t, filepath.Join(f.etc, "s4-agent"), attacker)
	srv := fusetest.Start(t, mnt, fusetest.Options{UserID: attacker})
	req := fastReg("agent-s4", mnt)
	req.Required = ptr(false)
	if code, body := f.registerAs(t, attacker, req); code != 201 {
		t.Fatalf("register its own FUSE mount: %d %s", code, body)
	}
	f.td.waitMountState(t, "agent-s4", api.MountHealthy)
	pid := srv.Pid()
	code, body := requestAs(t, f.td, attacker, attacker, nil, "DELETE", "/v1/mounts/agent-s4?unmount=true", "")
	var rel api.MountRelease
	if code != 200 || json.Unmarshal([]byte(body), &rel) != nil {
		t.Fatalf("DELETE: %d %s", code, body)
	}
	t.Logf("release: %s", body)
	if !rel.Unmounted || fuseMountedAt(mnt) {
		t.Fatalf("not unmounted: %+v", rel)
	}
	last := rel.Steps[len(rel.Steps)-1]
	if last.Step != "fusermount3" || last.Result != "done" {
		t.Errorf("last step %+v, want fusermount3 done", last)
	}
	if rel.Steps[0].Step != "sync" || rel.Steps[0].Result != "done" || !strings.Contains(rel.Steps[0].Detail, "uid 65534") {
		t.Errorf("first step %+v, want the sync done as uid 65534", rel.Steps[0])
	}
	poll(t, time.Minute, "the FUSE server to exit", func() bool { return serverGone(pid) })
}

// TestRegistrantCredentialFileReadWithItsRights: a credential_file 65534 may not read
// (root's, 0600) is refused at registration (403, issue 21: a registration that fails its
// first read is not saved) and the answer tells nothing of the file's content, while
// root's registration of the same file reads its expiry.
func TestRegistrantCredentialFileReadWithItsRights(t *testing.T) {
	f := newRegistrantFixture(t)
	secret := filepath.Join(f.etc, "secret.json")
	exp := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	if err := fusetest.WriteCred(secret, exp); err != nil {
		t.Fatal(err)
	}
	os.Chmod(secret, 0o600)
	mnt := dirOf(t, filepath.Join(f.own, "s5-agent"), attacker)
	req := fastReg("agent-s5", mnt)
	req.Required, req.CredentialFile = ptr(false), secret
	code, body := f.registerAs(t, attacker, req)
	if code != 403 || !strings.Contains(body, "permission denied") || strings.Contains(body, exp.Format("2006-01-02")) {
		t.Fatalf("register a file 65534 cannot read: %d %s; want 403 naming the refusal and not the expiry", code, body)
	}
	if _, ok := f.td.d.current().mounts.Get("agent-s5"); ok {
		t.Fatal("the refused registration is watched")
	}
	rootReq := fastReg("agent-s5-root", dirOf(t, filepath.Join(f.etc, "s5-root"), 0))
	rootReq.Required, rootReq.CredentialFile = ptr(false), secret
	mustRegister(t, f.td, rootReq)
	poll(t, time.Minute, "root's mount to read the file", func() bool {
		m := f.td.mount(t, "agent-s5-root")
		return m.CredentialExpiresAt != nil && m.CredentialExpiresAt.Equal(exp)
	})
}

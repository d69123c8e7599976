package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// The OpenAPI document proven against live answers (issue 26): every request this test
// makes and every answer the daemon gives is validated against docs/openapi.yaml with
// kin-openapi, an answer whose status the document does not list included. The test
// drives every route of the server's route table to a 2xx and the daemon to every error
// code it can give, so a field, a status or a route that drifts from the document fails
// here, not in a runner written in another language.

// openAPIDoc loads and validates docs/openapi.yaml.
func openAPIDoc(t testing.TB) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile("../docs/openapi.yaml")
	if err != nil {
		t.Fatalf("load docs/openapi.yaml: %v", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		t.Fatalf("docs/openapi.yaml is not a valid OpenAPI document: %v", err)
	}
	return doc
}

// closeObjects makes every object schema of doc that lists its properties refuse others
// (in memory, for this test): a field the daemon answers that the document does not
// describe fails the test, as a missing or mistyped one does. (Requests stay open: unknown
// request fields are ignored and named in warnings, CONTRACT §1.)
func closeObjects(doc *openapi3.T) {
	seen := map[*openapi3.Schema]bool{}
	var walk func(s *openapi3.SchemaRef)
	walk = func(s *openapi3.SchemaRef) {
		if s == nil || s.Value == nil || seen[s.Value] {
			return
		}
		v := s.Value
		seen[v] = true
		if len(v.Properties) > 0 && v.AdditionalProperties.Has == nil && v.AdditionalProperties.Schema == nil {
			no := false
			v.AdditionalProperties.Has = &no
		}
		for _, p := range v.Properties {
			walk(p)
		}
		walk(v.Items)
		walk(v.AdditionalProperties.Schema)
		for _, l := range [][]*openapi3.SchemaRef{v.OneOf, v.AnyOf, v.AllOf} {
			for _, x := range l {
				walk(x)
			}
		}
	}
	for _, path := range doc.Paths.Map() {
		for _, op := range path.Operations() {
			for _, r := range op.Responses.Map() {
				if r.Value == nil {
					continue
				}
				for _, mt := range r.Value.Content {
					walk(mt.Schema)
				}
			}
		}
	}
	walk(doc.Components.Schemas["Problem"])
}

// oaCheck validates exchanges and records what was covered.
type oaCheck struct {
	t      *testing.T
	doc    *openapi3.T
	router routers.Router

	mu     sync.Mutex
	routes map[string]bool   // "GET /v1/jobs/{id}" answered 2xx
	codes  map[api.Code]bool // problem codes answered
	seen   map[string]bool   // "GET /v1/jobs/{id} 404"
}

func newOACheck(t *testing.T) *oaCheck {
	doc := openAPIDoc(t)
	closeObjects(doc)
	r, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	return &oaCheck{t: t, doc: doc, router: r, routes: map[string]bool{}, codes: map[api.Code]bool{}, seen: map[string]bool{}}
}

// exchange sends one request through rt and validates it and its answer. invalid marks a
// request that is wrong on purpose (to draw a 400 or 413): only its answer is validated.
func (c *oaCheck) exchange(rt http.RoundTripper, method, path, body string, invalid bool) (int, []byte) {
	c.t.Helper()
	req, err := http.NewRequest(method, "http://sandboxd"+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	route, params, routeErr := c.router.FindRoute(req)
	var in *openapi3filter.RequestValidationInput
	opts := &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true, AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}
	if routeErr == nil {
		in = &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts}
		if !invalid {
			if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
				c.t.Errorf("%s %s %s: the request does not match docs/openapi.yaml: %s", method, path, body, firstLine(err))
			}
			req.Body = io.NopCloser(strings.NewReader(body)) // validation read it
		}
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	where := fmt.Sprintf("%s %s %.200s -> %d %.300s", method, path, body, resp.StatusCode, data)
	if routeErr == nil {
		out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode,
			Header: resp.Header, Body: io.NopCloser(bytes.NewReader(data)), Options: opts}
		if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
			c.t.Errorf("%s: the answer does not match docs/openapi.yaml: %s", where, firstLine(err))
		}
		c.mu.Lock()
		key := route.Method + " " + route.Path
		c.seen[key+" "+strconv.Itoa(resp.StatusCode)] = true
		if resp.StatusCode < 300 {
			c.routes[key] = true
		}
		c.mu.Unlock()
	} else if resp.StatusCode < 400 {
		c.t.Errorf("%s: a route docs/openapi.yaml does not have answered: %v", where, routeErr)
	}
	if resp.StatusCode >= 400 {
		c.problem(where, resp, data)
	}
	return resp.StatusCode, data
}

// spawn drives POST /v1/jobs/spawn through the Go client (the 101 and the fds are beyond
// an http.RoundTripper) and validates the offer's and the answer's job against the Job
// schema.
func (c *oaCheck) spawn(sock string) {
	c.t.Helper()
	cl := &client.Client{SocketPath: sock}
	sp, err := cl.BeginSpawn(context.Background(), api.JobRequest{ID: "oa-sp", TTL: ptrDur(time.Minute), Launch: &api.LaunchRequest{Site: "ok"}})
	if err != nil {
		c.t.Fatalf("POST /v1/jobs/spawn: %v", err)
	}
	defer sp.Close()
	c.schema("the spawn's offer", "Job", sp.Job)
	pidfd := -1
	pid, err := syscall.ForkExec("/bin/sleep", []string{"sleep", "600"}, &syscall.ProcAttr{Sys: &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: sp.CgroupFD, PidFD: &pidfd}})
	if err != nil {
		c.t.Fatalf("clone3 into the offered cgroup: %v", err)
	}
	c.t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL); syscall.Wait4(pid, nil, 0, nil) })
	if err := sp.Spawned(pidfd); err != nil {
		c.t.Fatal(err)
	}
	syscall.Close(pidfd)
	j, err := sp.Result()
	if err != nil {
		c.t.Fatalf("the spawn's answer: %v", err)
	}
	c.schema("the spawn's answer", "Job", *j)
	if j.PID != pid || j.Launch == nil || j.State != api.JobRunning {
		c.t.Errorf("the spawn's answer: pid %d launch %v state %s, want pid %d, the launch answer, running", j.PID, j.Launch, j.State, pid)
	}
	c.mu.Lock()
	c.routes["POST /v1/jobs/spawn"] = true
	c.seen["POST /v1/jobs/spawn 101"] = true
	c.mu.Unlock()
}

// schema validates v, as JSON, against the component schema name.
func (c *oaCheck) schema(where, name string, v any) {
	c.t.Helper()
	b, _ := json.Marshal(v)
	var doc any
	json.Unmarshal(b, &doc)
	if err := c.doc.Components.Schemas[name].Value.VisitJSON(doc); err != nil {
		c.t.Errorf("%s does not match docs/openapi.yaml's %s: %s", where, name, firstLine(err))
	}
}

func ptrDur(d time.Duration) *api.Duration {
	x := api.Duration(d)
	return &x
}

// problem checks a non-2xx answer is a problem document of the Problem schema with the
// status its code has, and records the code. Answers of routes the document has are
// validated above too; this also covers unknown routes and wrong methods.
func (c *oaCheck) problem(where string, resp *http.Response, data []byte) {
	c.t.Helper()
	var p api.Problem
	if ct := resp.Header.Get("Content-Type"); ct != api.ProblemContentType {
		// /livez, /readyz and /v1/health answer 503 with their own bodies (validated
		// against their schemas above).
		if resp.StatusCode == 503 && ct == "application/json" {
			return
		}
		c.t.Errorf("%s: content type %q, want %s", where, ct, api.ProblemContentType)
		return
	}
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		c.t.Errorf("%s: not JSON: %v", where, err)
		return
	}
	schema := c.doc.Components.Schemas["Problem"].Value
	if err := schema.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
		c.t.Errorf("%s: not a Problem of docs/openapi.yaml: %s", where, firstLine(err))
	}
	json.Unmarshal(data, &p)
	if p.Status != resp.StatusCode || p.Code.Status() != resp.StatusCode {
		c.t.Errorf("%s: code %s with status %d in a %d answer", where, p.Code, p.Status, resp.StatusCode)
	}
	c.mu.Lock()
	c.codes[p.Code] = true
	c.mu.Unlock()
}

// firstLine is kin-openapi's error without the schema and value it dumps after it.
func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

func unixRT(sock string) http.RoundTripper {
	return &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}
}

func tcpRT(addr string) http.RoundTripper {
	return &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}}
}

// startDaemonTCP is startDaemon with the loopback TCP listener too; it returns its address.
func startDaemonTCP(t *testing.T, body string, mutate ...func(*Options)) (*testDaemon, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "sandboxd-test-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	t.Cleanup(func() { os.RemoveAll(dir) })
	text := baseConfig(dir, body)
	cfg := parseConfig(t, text)
	cfgPath := filepath.Join(dir, "sandboxd.toml") // what POST /v1/config/reload reads again
	os.WriteFile(cfgPath, []byte(text), 0o644)
	opts := Options{Config: cfg, ConfigPath: cfgPath, Logger: testLogger(t), Version: "test"}
	for _, m := range mutate {
		m(&opts)
	}
	d, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ln, err := ListenUnix(cfg.Server.Socket, cfg.Server.SocketMode, cfg.Server.SocketGroup)
	if err != nil {
		t.Fatal(err)
	}
	tcp, err := ListenTCP("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	td := &testDaemon{d: d, sock: cfg.Server.Socket, dir: dir, cancel: cancel, done: make(chan error, 1),
		client: &client.Client{SocketPath: cfg.Server.Socket}}
	td.http = &http.Client{Transport: unixRT(td.sock)}
	go func() { td.done <- d.Run(ctx, ln, tcp) }()
	t.Cleanup(td.stop)
	td.waitReady(t)
	return td, tcp.Addr().String()
}

// fillFiles creates empty files in dir until the filesystem has no inode left.
func fillFiles(t *testing.T, dir string) {
	for i := 0; ; i++ {
		f, err := os.Create(filepath.Join(dir, "f"+strconv.Itoa(i)))
		if err != nil {
			return
		}
		f.Close()
		if i > 1<<20 {
			t.Fatal("no inode limit")
		}
	}
}

func TestOpenAPIAgainstLiveAnswers(t *testing.T) {
	c := newOACheck(t)
	root := testenv.CgroupRoot(t)
	ok := testenv.Tmpfs(t, 64<<20, 0)      // room: the 2xx answers
	full := testenv.Tmpfs(t, 8<<20, 0)     // filled: disk_full
	small := testenv.Tmpfs(t, 8<<20, 0)    // filled below replace_below: replace_sandbox
	inodes := testenv.Tmpfs(t, 64<<20, 64) // out of inodes: inodes_exhausted
	gone := testenv.Tmpfs(t, 8<<20, 0)     // its watched path removed: filesystem_unavailable
	for _, d := range []string{"site", "cache"} {
		os.Mkdir(filepath.Join(ok, d), 0o755)
	}
	for _, m := range []string{full, small, inodes} {
		os.Mkdir(filepath.Join(m, "site"), 0o755)
	}
	os.Mkdir(filepath.Join(gone, "site"), 0o755)
	os.Mkdir(filepath.Join(gone, "watched"), 0o755)
	testenv.Fill(filepath.Join(ok, "cache", "old.tgz"), 1<<20)
	old := time.Now().Add(-48 * time.Hour)
	os.Chtimes(filepath.Join(ok, "cache", "old.tgz"), old, old)
	nomount := filepath.Join(t.TempDir(), "nomount")
	os.Mkdir(nomount, 0o755)
	body := fmt.Sprintf(`[[site]]
name = "ok"
path = %q
[[site]]
name = "full"
path = %q
[[site]]
name = "small"
path = %q
[[site]]
name = "inodes"
path = %q
[[site]]
name = "gone"
path = %q
[[filesystem]]
path = %q
reclaim_below = "2MiB"
replace_below = "512KiB"
reserve = "0"
[[filesystem]]
path = %q
reclaim_below = "1MiB"
replace_below = "0"
reserve = "0"
[[filesystem]]
path = %q
reclaim_below = "2MiB"
replace_below = "1MiB"
reserve = "0"
[[filesystem]]
path = %q
reclaim_below = "0"
replace_below = "0"
reclaim_below_inodes = 8
replace_below_inodes = 0
reserve = "0"
[[filesystem]]
path = %q
reclaim_below = "1MiB"
replace_below = "0"
reserve = "0"
[[reclaim.cache]]
name = "pkgs"
path = %q
[[mount]]
name = "gone"
path = %q
required = false
[jobs]
cgroup_root = %q
registry_dir = %q
grace = "500ms"
`, filepath.Join(ok, "site"), filepath.Join(full, "site"), filepath.Join(small, "site"), filepath.Join(inodes, "site"),
		filepath.Join(gone, "site"), ok, full, small, inodes, filepath.Join(gone, "watched"), filepath.Join(ok, "cache"), nomount, root, t.TempDir())
	td, tcpAddr := startDaemonTCP(t, body, probeSelf)
	u, tcp := unixRT(td.sock), tcpRT(tcpAddr)
	do := func(method, path, body string) (int, []byte) { return c.exchange(u, method, path, body, false) }
	bad := func(method, path, body string) (int, []byte) { return c.exchange(u, method, path, body, true) }
	want := func(status int, got int, data []byte, what string) {
		t.Helper()
		if got != status {
			t.Errorf("%s: %d, want %d: %.300s", what, got, status, data)
		}
	}

	// The read endpoints.
	for _, p := range []string{"/livez", "/readyz", "/metrics", "/v1/status", "/v1/events?since=0", "/v1/config", "/v1/mounts", "/v1/jobs", "/v1/jobs/leaks"} {
		s, data := do("GET", p, "")
		want(200, s, data, p)
	}
	do("GET", "/v1/health", "") // 200 or 503 with its body; both validated

	// Launch, resume, reclaim.
	s, data := do("POST", "/v1/config/reload", "")
	want(200, s, data, "config reload")
	if !strings.Contains(string(data), `"reloaded":true`) {
		t.Errorf("config reload of the file the daemon runs on: %s", data)
	}
	s, data = do("POST", "/v1/launch", `{"site":"ok","need_bytes":"1MiB","need_inodes":4,"deadline":"5s"}`)
	want(200, s, data, "launch")
	s, data = do("POST", "/v1/resume", `{"deadline":"20s"}`)
	want(200, s, data, "resume")
	s, data = do("POST", "/v1/reclaim", `{"dry_run":true,"target_free":"60MiB"}`)
	want(200, s, data, "reclaim dry run")

	// Jobs: register, get, heartbeat, list, end.
	sleeper := jobSleeper(t)
	s, data = do("POST", "/v1/jobs", fmt.Sprintf(`{"id":"oa1","pid":%d,"ttl":"1m","site":"ok","labels":{"turn":"1"}}`, sleeper.Process.Pid))
	want(201, s, data, "register")
	s, data = do("POST", "/v1/jobs", fmt.Sprintf(`{"id":"oa1","pid":%d}`, sleeper.Process.Pid))
	want(409, s, data, "register again")
	s, data = do("GET", "/v1/jobs/oa1", "")
	want(200, s, data, "job")
	s, data = do("POST", "/v1/jobs/oa1/heartbeat", `{"extend":"2m"}`)
	want(200, s, data, "heartbeat")
	s, data = do("DELETE", "/v1/jobs/oa1", "")
	want(200, s, data, "end")
	s, data = do("POST", "/v1/jobs/oa1/heartbeat", `{}`)
	want(404, s, data, "heartbeat of an ended job")
	s, data = do("GET", "/v1/jobs/nope", "")
	want(404, s, data, "unknown job")
	s, data = do("DELETE", "/v1/jobs/nope?wait=false", "")
	want(404, s, data, "end an unknown job")
	// Spawning (issue 27): without the Upgrade header a 400; with it, the launch check
	// and the registration in one call, the offer, the child reported by its pidfd.
	s, data = bad("POST", "/v1/jobs/spawn", `{"id":"oa-sp"}`)
	want(400, s, data, "spawn without Upgrade")
	c.spawn(td.sock)

	// Shared leases (issue 20 item 4): register into one, list, renew, end.
	leased := jobSleeper(t)
	s, data = do("POST", "/v1/jobs", fmt.Sprintf(`{"id":"oa2","pid":%d,"ttl":"1m","lease":"sess-1"}`, leased.Process.Pid))
	want(201, s, data, "register into a shared lease")
	s, data = do("GET", "/v1/leases", "")
	want(200, s, data, "leases")
	s, data = do("POST", "/v1/leases/sess-1/heartbeat", `{"extend":"2m"}`)
	want(200, s, data, "lease heartbeat")
	s, data = do("DELETE", "/v1/leases/sess-1", "")
	want(200, s, data, "end a lease")
	s, data = do("POST", "/v1/leases/sess-1/heartbeat", "")
	want(404, s, data, "heartbeat of an ended lease")

	// Runtime mounts: register, get, push credentials, release.
	mp := filepath.Join(t.TempDir(), "agent")
	os.Mkdir(mp, 0o755)
	s, data = do("POST", "/v1/mounts", fmt.Sprintf(`{"name":"oa-agent","path":%q,"required":false,"credential_expires_at":"2030-01-02T03:04:05Z"}`, mp))
	want(201, s, data, "register a mount")
	s, data = do("POST", "/v1/mounts", fmt.Sprintf(`{"name":"oa-agent","path":%q}`, mp))
	want(409, s, data, "register the mount again")
	s, data = do("GET", "/v1/mounts/oa-agent", "")
	want(200, s, data, "mount")
	s, data = do("PUT", "/v1/mounts/oa-agent/credentials", `{"expires_at":"2030-01-02T04:04:05Z"}`)
	want(200, s, data, "push credentials")
	s, data = do("DELETE", "/v1/mounts/oa-agent?unmount=false", "")
	want(200, s, data, "release")
	s, data = do("GET", "/v1/mounts/oa-agent", "")
	want(404, s, data, "released mount")

	// Refusals: bad input, wrong method, unknown route, too large, forbidden on TCP.
	s, data = bad("POST", "/v1/launch", `{"need_bytes":"lots"}`)
	want(400, s, data, "a bad size")
	s, data = bad("POST", "/v1/jobs", `{"pid":"x"}`)
	want(400, s, data, "a wrong type")
	s, data = bad("GET", "/v1/events?since=-1", "")
	want(400, s, data, "a bad since")
	s, data = bad("POST", "/v1/launch", `{"x":"`+strings.Repeat("a", 70<<10)+`"}`)
	want(413, s, data, "a body over 64 KiB")
	s, data = bad("PUT", "/v1/status", "")
	want(405, s, data, "a wrong method")
	s, data = bad("GET", "/v1/nothing", "")
	want(404, s, data, "an unknown route")
	s, data = c.exchange(tcp, "POST", "/v1/launch", `{}`, false)
	want(403, s, data, "a mutating call on the TCP listener")
	s, data = c.exchange(tcp, "GET", "/v1/status", "", false)
	want(200, s, data, "status on the TCP listener")
	s, data = do("POST", "/v1/launch", `{"site":"nope"}`)
	want(404, s, data, "an unknown site")

	// busy: a resume whose deadline passes before anything is measured.
	busy := false
	for i := 0; i < 50 && !busy; i++ {
		s, _ := do("POST", "/v1/resume", `{"deadline":"1ns"}`)
		busy = s == 503
	}
	if !busy {
		t.Error("no resume with a 1ns deadline answered busy")
	}

	// mount_unavailable: a launch needing the configured mount that is not mounted.
	poll(t, time.Minute, "mount gone's first probe", func() bool {
		_, data := do("GET", "/v1/mounts/gone", "")
		var m api.Mount
		json.Unmarshal(data, &m)
		return m.State != "" && m.State != api.MountHealthy
	})
	s, data = do("POST", "/v1/launch", `{"site":"ok","mounts":["gone"]}`)
	want(503, s, data, "launch needing a missing mount")

	// The space refusals, each on a filesystem made to need it.
	testenv.Fill(filepath.Join(full, "site", "fill"), 64<<20)
	testenv.Fill(filepath.Join(small, "site", "fill"), 64<<20)
	fillFiles(t, filepath.Join(inodes, "site"))
	os.Remove(filepath.Join(gone, "watched")) // by path: a test tmpfs
	poll(t, time.Minute, "the samples of the filled and the removed filesystems", func() bool {
		st, err := td.client.Status(context.Background())
		if err != nil {
			return false
		}
		n := 0
		for _, f := range st.Filesystems {
			switch {
			case f.Path == full || f.Path == small:
				if f.AvailBytes == 0 {
					n++
				}
			case f.Path == inodes:
				if f.FilesFree == 0 {
					n++
				}
			case f.Path == filepath.Join(gone, "watched"):
				if f.Errno != "" {
					n++
				}
			}
		}
		return n == 4
	})
	for site, code := range map[string]api.Code{"full": api.CodeDiskFull, "small": api.CodeReplaceSandbox,
		"inodes": api.CodeInodesExhausted, "gone": api.CodeFilesystemUnavailable} {
		s, data := do("POST", "/v1/launch", fmt.Sprintf(`{"site":%q,"need_bytes":4096,"need_inodes":4}`, site))
		if !strings.Contains(string(data), `"code":"`+string(code)+`"`) {
			t.Errorf("launch on site %s: %d %s, want %s", site, s, data, code)
		}
	}
	do("GET", "/v1/health", "") // critical now: 503 with its body, validated
	do("GET", "/v1/status", "")

	// jobs_unavailable: a daemon whose jobs root is no cgroup v2.
	td2, _ := startDaemonTCP(t, fmt.Sprintf("site = []\n[[filesystem]]\npath = %q\nreserve = \"0\"\nreclaim_below = \"1MiB\"\nreplace_below = \"0\"\n[jobs]\ncgroup_root = %q\nregistry_dir = %q\n",
		ok, filepath.Join(ok, "not-a-cgroup"), t.TempDir()))
	u2 := unixRT(td2.sock)
	s, data = c.exchange(u2, "POST", "/v1/jobs", fmt.Sprintf(`{"pid":%d}`, sleeper.Process.Pid), false)
	want(503, s, data, "register without cgroup v2")
	c.exchange(u2, "GET", "/v1/jobs", "", false)
	c.exchange(u2, "GET", "/v1/jobs/leaks", "", false)

	// state_unavailable: a daemon whose job registry cannot be written (its registry_dir
	// is a regular file), so a registration cannot be made durable (issue 20 item 2).
	regFile := filepath.Join(ok, "registry-is-a-file")
	os.WriteFile(regFile, nil, 0o600)
	os.Mkdir(filepath.Join(root, "state"), 0o755) // a cgroup of its own beside the first daemon's jobs
	td3, _ := startDaemonTCP(t, fmt.Sprintf("site = []\n[[filesystem]]\npath = %q\nreserve = \"0\"\nreclaim_below = \"1MiB\"\nreplace_below = \"0\"\n[jobs]\ncgroup_root = %q\nregistry_dir = %q\n",
		ok, filepath.Join(root, "state"), regFile))
	s, data = c.exchange(unixRT(td3.sock), "POST", "/v1/jobs", fmt.Sprintf(`{"pid":%d}`, sleeper.Process.Pid), false)
	want(503, s, data, "register with a registry that cannot be written")
	if !strings.Contains(string(data), `"code":"state_unavailable"`) {
		t.Errorf("register with a registry that cannot be written: %d %s", s, data)
	}

	// Every route of the server answered a 2xx, every error code was seen.
	for _, r := range td.d.Routes() {
		if !c.routes[r] {
			t.Errorf("route %s was not driven to a 2xx answer", r)
		}
	}
	for _, code := range api.Codes {
		if code == api.CodeInternal {
			continue // a bug: nothing in a correct daemon answers it (its schema is the same Problem)
		}
		if !c.codes[code] {
			t.Errorf("error code %s was not seen", code)
		}
	}
	var seen []string
	for k := range c.seen {
		seen = append(seen, k)
	}
	sort.Strings(seen)
	t.Logf("validated %d (route, status) pairs: %s", len(seen), strings.Join(seen, ", "))
}

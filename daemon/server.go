package daemon

import (
	"context"
	"net"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// route is one entry of the route table.
type route struct {
	pattern  string // Go method pattern, from package api
	handler  func(w http.ResponseWriter, r *http.Request) error
	mutating bool
}

// routes is the one route table: the server, the 404/405 logic and the OpenAPI test all
// read it.
func (d *Daemon) routes() []route {
	return append([]route{
		{api.RouteLivez, d.handleLivez, false},
		{api.RouteReadyz, d.handleReadyz, false},
		{api.RouteMetrics, d.handleMetrics, false},
		{api.RouteHealth, d.handleHealth, false},
		{api.RouteStatus, d.handleStatus, false},
		{api.RouteEvents, d.handleEvents, false},
		{api.RouteConfig, d.handleConfig, false},
		{api.RouteConfigReload, d.handleConfigReload, true},
		{api.RouteLaunch, d.handleLaunch, true},
		{api.RouteResume, d.handleResume, true},
		// Reclaim authorizes in its handler: a dry run changes nothing, so any peer on
		// the Unix socket may ask for the plan; a real one is for writers.
		{api.RouteReclaim, d.handleReclaim, false},
		{api.RouteMountsList, d.handleMountsList, false},
		{api.RouteMountsAdd, d.handleMountsAdd, true},
		{api.RouteMountGet, d.handleMountGet, false},
		{api.RouteMountDelete, d.handleMountDelete, true},
		{api.RouteMountCredentials, d.handleMountCredentials, true},
	}, d.jobRoutes()...)
}

// Routes lists the server's route patterns (for the OpenAPI completeness test).
func (d *Daemon) Routes() []string {
	var out []string
	for _, rt := range d.routes() {
		out = append(out, rt.pattern)
	}
	return out
}

// Handler is the HTTP handler of the API: peer authorization on mutating routes,
// problem+json for every failure including unknown routes and wrong methods.
func (d *Daemon) Handler() http.Handler {
	mux := http.NewServeMux()
	methods := map[string][]string{} // path -> methods, for 405's Allow
	// static holds the routes without wildcards by path and method: a request for one is
	// served without the mux's pattern matching (the mux matched twice per request, once
	// for 404/405 and once to serve). Wildcard routes need the mux for PathValue.
	static := map[string]map[string]http.HandlerFunc{}
	for _, rt := range d.routes() {
		rt := rt
		method, path, _ := strings.Cut(rt.pattern, " ")
		methods[path] = append(methods[path], method)
		h := func(w http.ResponseWriter, r *http.Request) {
			if rt.mutating {
				if err := d.authorize(r); err != nil {
					writeProblem(w, err)
					return
				}
				defer d.statusCache.invalidate() // what the call changed shows at once
			}
			if err := rt.handler(w, r); err != nil {
				writeProblem(w, asProblem(err))
			}
		}
		mux.HandleFunc(rt.pattern, h)
		if !strings.Contains(path, "{") && !strings.HasSuffix(path, "/") {
			if static[path] == nil {
				static[path] = map[string]http.HandlerFunc{}
			}
			static[path][method] = h
		}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r, p := canonical(r)
		if p != nil {
			writeProblem(w, p)
			return
		}
		if h, ok := static[r.URL.Path][r.Method]; ok {
			h(w, r)
			return
		}
		if _, pattern := mux.Handler(r); pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		if ms, ok := methods[r.URL.Path]; ok {
			if r.Method == http.MethodHead && contains(ms, http.MethodGet) {
				mux.ServeHTTP(w, r)
				return
			}
			w.Header().Set("Allow", strings.Join(ms, ", "))
			writeProblem(w, api.NewProblem(api.CodeMethodNotAllowed, "%s is not allowed on %s; allowed: %s",
				r.Method, r.URL.Path, strings.Join(ms, ", ")))
			return
		}
		writeProblem(w, api.NewProblem(api.CodeNotFound, "no route %s %s", r.Method, r.URL.Path))
	})
}

// canonical serves a path with empty, "." or ".." segments or a trailing slash
// ("//v1/status", "/v1/../v1/status", "/v1/status/") as its clean form, as the mux would
// after a redirect, but without its HTML 307 (every non-2xx answer is problem+json,
// CONTRACT §3). A path whose escapes would change meaning when cleaned (%2F, %2e%2e) is
// refused with 400 instead of being guessed at.
func canonical(r *http.Request) (*http.Request, *api.Problem) {
	if r.URL.Path == "" || r.URL.Path[0] != '/' {
		return r, nil // "*" and the like: the mux answers those with 404 problem+json
	}
	clean := path.Clean(r.URL.Path)
	if clean == r.URL.Path {
		return r, nil
	}
	if r.URL.RawPath != "" {
		return r, api.NewProblem(api.CodeBadRequest, "path %q is not in canonical form and holds escapes; ask for the clean path", r.URL.RawPath)
	}
	r2 := r.Clone(r.Context())
	r2.URL.Path = clean
	return r2, nil
}

// authorize lets a mutating call through for root, the daemon's uid and the writers, and
// refuses anyone else with 403, logged and recorded with the peer's uid and pid.
func (d *Daemon) authorize(r *http.Request) *api.Problem {
	p := peerFrom(r.Context())
	ok, why := d.writers().allowed(p, d.selfUID)
	if ok {
		return nil
	}
	d.events.Record(api.Event{Kind: api.EventRefusal, Subject: r.URL.Path,
		Message: "refused a mutating call: " + why,
		Fields:  map[string]any{"uid": p.UID, "pid": p.PID, "tcp": p.TCP}})
	return api.NewProblem(api.CodeForbidden, "%s %s: %s", r.Method, r.URL.Path, why)
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// newHTTPServer sets the timeouts that keep slow or idle clients from holding the
// server (CONTRACT §1). WriteTimeout is left to each handler's deadline, since a resume
// may legitimately take its whole deadline; ReadTimeout bounds the body.
func (d *Daemon) newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ConnContext:       connContext,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          nil,
		BaseContext:       func(net.Listener) context.Context { return d.baseCtx },
	}
}

// Package api is sandboxd's wire contract: the request and response types of every
// endpoint, the route names, the error codes of problem+json answers, the size and
// duration encodings, and the default socket path. It is shared by the daemon, the Go
// client and the CLI, and imports only the standard library so that a runner written
// against it pulls in nothing else. The names here are fixed by CONTRACT.md.
package api

// Version is the API version that GET /v1/status reports as api_version.
const Version = 1

// DefaultSocketPath is where the packaged daemon listens.
const DefaultSocketPath = "/run/sandboxd/sandboxd.sock"

// SocketEnv names the environment variable that client commands read for the socket path.
const SocketEnv = "SANDBOXD_SOCKET"

// MaxBodyBytes is the largest request body the daemon reads; larger bodies get 413.
const MaxBodyBytes = 64 << 10

// Routes, as Go 1.22 method patterns. One table, used by the server, the client and the
// test that keeps docs/openapi.yaml complete.
const (
	RouteLivez   = "GET /livez"
	RouteReadyz  = "GET /readyz"
	RouteMetrics = "GET /metrics"
	RouteHealth  = "GET /v1/health"
	RouteStatus  = "GET /v1/status"
	RouteEvents  = "GET /v1/events"
	RouteConfig  = "GET /v1/config"
	RouteLaunch  = "POST /v1/launch"
	RouteResume  = "POST /v1/resume"
	RouteReclaim = "POST /v1/reclaim"
)

// Features lists the capability strings a daemon may report in status.features.
const (
	FeatureLaunch  = "launch"
	FeatureResume  = "resume"
	FeatureReclaim = "reclaim"
	FeatureMounts  = "mounts"
	FeatureEvents  = "events"
	FeatureMetrics = "metrics"
)

// Modes of the daemon ([server] mode).
const (
	ModeEnforce = "enforce"
	ModeObserve = "observe"
)

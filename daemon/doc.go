// Package daemon is sandboxd's composition root: it turns a loaded config into running
// components (pressure, retention, reclaim, mountwatch), serves the HTTP API on the
// listeners main hands it (peer credentials, problem+json, the one route table), keeps
// the audit trail and the health conditions, reports to systemd, builds the Prometheus
// metrics from the components' snapshots, and applies config reloads.
package daemon

package client

import (
	"context"
	"net/url"
	"strconv"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// Status returns the daemon's full state (GET /v1/status).
func (c *Client) Status(ctx context.Context) (*api.Status, error) {
	var s api.Status
	if err := c.Do(ctx, "GET", "/v1/status", nil, &s, 0); err != nil {
		return nil, err
	}
	return &s, nil
}

// Health returns the sandbox's health (GET /v1/health). A critical sandbox answers 503,
// which is not an error here: the body is returned with Status "critical".
func (c *Client) Health(ctx context.Context) (*api.Health, error) {
	var h api.Health
	if err := c.do(ctx, "GET", "/v1/health", nil, &h, 0, true); err != nil {
		return nil, err
	}
	return &h, nil
}

// Events returns the audit trail after sequence number since (GET /v1/events?since=N).
func (c *Client) Events(ctx context.Context, since uint64) (*api.EventsPage, error) {
	var p api.EventsPage
	q := url.Values{"since": {strconv.FormatUint(since, 10)}}
	if err := c.Do(ctx, "GET", "/v1/events?"+q.Encode(), nil, &p, 0); err != nil {
		return nil, err
	}
	return &p, nil
}

// Config returns the running daemon's effective config as TOML (GET /v1/config).
func (c *Client) Config(ctx context.Context) (string, error) {
	var out struct {
		TOML string `json:"toml"`
	}
	if err := c.Do(ctx, "GET", "/v1/config", nil, &out, 0); err != nil {
		return "", err
	}
	return out.TOML, nil
}

// Livez asks whether the daemon's supervisor loop is alive.
func (c *Client) Livez(ctx context.Context) error {
	return c.Do(ctx, "GET", "/livez", nil, nil, 0)
}

func deadlineOf(d *api.Duration, def time.Duration) time.Duration {
	if d != nil {
		return d.D()
	}
	return def
}

// Launch makes the write-site call before a command (POST /v1/launch). A refusal is a
// *ProblemError; one whose filesystem cannot be measured is FilesystemUnavailable.
func (c *Client) Launch(ctx context.Context, req api.LaunchRequest) (*api.LaunchResponse, error) {
	var r api.LaunchResponse
	if err := c.Do(ctx, "POST", "/v1/launch", req, &r, deadlineOf(req.Deadline, 2*time.Second)); err != nil {
		return nil, err
	}
	return &r, nil
}

// Resume runs the resume hook (POST /v1/resume). A filesystem that could not be measured
// is in the answer's Unmeasured, or, when none could be, FilesystemUnavailable(err).
func (c *Client) Resume(ctx context.Context, req api.ResumeRequest) (*api.ReclaimRun, error) {
	var r api.ReclaimRun
	if err := c.Do(ctx, "POST", "/v1/resume", req, &r, deadlineOf(req.Deadline, 30*time.Second)); err != nil {
		return nil, err
	}
	return &r, nil
}

// Reclaim plans (dry run) or performs a reclaim (POST /v1/reclaim).
func (c *Client) Reclaim(ctx context.Context, req api.ReclaimRequest) (*api.ReclaimRun, error) {
	var r api.ReclaimRun
	if err := c.Do(ctx, "POST", "/v1/reclaim", req, &r, deadlineOf(req.Deadline, 60*time.Second)); err != nil {
		return nil, err
	}
	return &r, nil
}

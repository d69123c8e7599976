package client

import (
	"context"
	"net/url"
	"strconv"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// RegisterJob registers a job (POST /v1/jobs): req.PID and what it forks from then on are
// held in a cgroup of their own, under a lease of req.TTL that Heartbeat renews. A
// conflict (id in use) is a *ProblemError with code api.CodeConflict.
func (c *Client) RegisterJob(ctx context.Context, req api.JobRequest) (*api.Job, error) {
	var j api.Job
	if err := c.Do(ctx, "POST", "/v1/jobs", req, &j, 0); err != nil {
		return nil, err
	}
	return &j, nil
}

// Heartbeat renews job id's lease by extend (0: the job's ttl), never past its
// max_lifetime. Heartbeats belong in the runner that owns the job, never in the job: a
// lease the job renews for itself is no dead-man switch. The answer does not count the
// job's processes (its "processes" is null, so Processes is 0 here): Job counts them.
func (c *Client) Heartbeat(ctx context.Context, id string, extend time.Duration) (*api.Job, error) {
	// Without extend no body is sent (an empty POST is {}): the cheapest renewal there is.
	var req any
	if extend > 0 {
		d := api.Duration(extend)
		req = api.HeartbeatRequest{Extend: &d}
	}
	var j api.Job
	if err := c.Do(ctx, "POST", "/v1/jobs/"+url.PathEscape(id)+"/heartbeat", req, &j, 0); err != nil {
		return nil, err
	}
	return &j, nil
}

// EndJob ends job id (DELETE /v1/jobs/{id}): SIGTERM, SIGKILL after its grace. With wait
// it returns only once no process of the job is left; grace bounds the wait the client
// allows (the daemon waits up to grace plus 10 s after SIGKILL).
func (c *Client) EndJob(ctx context.Context, id string, wait bool, grace time.Duration) (*api.Job, error) {
	return c.EndJobOf(ctx, id, nil, wait, grace)
}

// EndJobOf is EndJob of owner's job id (?owner=UID: ids are each owner's own); nil owner
// is the caller's own, else the only job of that id.
func (c *Client) EndJobOf(ctx context.Context, id string, owner *uint32, wait bool, grace time.Duration) (*api.Job, error) {
	q := url.Values{}
	if !wait {
		q.Set("wait", "false")
	}
	if owner != nil {
		q.Set("owner", strconv.FormatUint(uint64(*owner), 10))
	}
	path := "/v1/jobs/" + url.PathEscape(id)
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var j api.Job
	if err := c.Do(ctx, "DELETE", path, nil, &j, grace+15*time.Second); err != nil {
		return nil, err
	}
	return &j, nil
}

// Job returns one job (GET /v1/jobs/{id}).
func (c *Client) Job(ctx context.Context, id string) (*api.Job, error) {
	var j api.Job
	if err := c.Do(ctx, "GET", "/v1/jobs/"+url.PathEscape(id), nil, &j, 0); err != nil {
		return nil, err
	}
	return &j, nil
}

// Jobs lists every registered job (GET /v1/jobs), following the pages.
func (c *Client) Jobs(ctx context.Context) (*api.JobsPage, error) {
	var all api.JobsPage
	for after := ""; ; {
		var p api.JobsPage
		path := "/v1/jobs?limit=1000"
		if after != "" {
			path += "&after=" + url.QueryEscape(after)
		}
		if err := c.Do(ctx, "GET", path, nil, &p, 0); err != nil {
			return nil, err
		}
		jobs := append(all.Jobs, p.Jobs...)
		all, all.Jobs = p, jobs
		if p.Next == "" {
			all.Next = ""
			return &all, nil
		}
		after = p.Next
	}
}

// Leaks runs the loud leak check (GET /v1/jobs/leaks); with clean the daemon ends each
// leak first and still reports it. A check that cannot run is an error (jobs_unavailable
// or unreachable), never an empty report.
func (c *Client) Leaks(ctx context.Context, clean bool) (*api.LeaksReport, error) {
	path := "/v1/jobs/leaks"
	var deadline time.Duration
	if clean {
		path += "?clean=true"
		deadline = 5 * time.Minute
	}
	var r api.LeaksReport
	if err := c.Do(ctx, "GET", path, nil, &r, deadline); err != nil {
		return nil, err
	}
	return &r, nil
}

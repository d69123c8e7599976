package client

import (
	"context"
	"net/url"
	"strconv"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// HeartbeatLease renews every job of the shared lease name by extend (0: the lease's
// ttl): one call for a whole session (CONTRACT §17).
func (c *Client) HeartbeatLease(ctx context.Context, name string, extend time.Duration) (*api.Lease, error) {
	var req any
	if extend > 0 {
		d := api.Duration(extend)
		req = api.HeartbeatRequest{Extend: &d}
	}
	var l api.Lease
	if err := c.Do(ctx, "POST", "/v1/leases/"+url.PathEscape(name)+"/heartbeat", req, &l, 0); err != nil {
		return nil, err
	}
	return &l, nil
}

// EndLease ends every job of the shared lease name; with wait it returns only once none
// of their processes is left (grace bounds the wait the client allows).
func (c *Client) EndLease(ctx context.Context, name string, wait bool, grace time.Duration) (*api.Lease, error) {
	return c.EndLeaseOf(ctx, name, nil, wait, grace)
}

// EndLeaseOf is EndLease of owner's lease name (?owner=UID: names are each owner's own);
// nil owner is the caller's own, else the only lease of that name.
func (c *Client) EndLeaseOf(ctx context.Context, name string, owner *uint32, wait bool, grace time.Duration) (*api.Lease, error) {
	q := url.Values{}
	if !wait {
		q.Set("wait", "false")
	}
	if owner != nil {
		q.Set("owner", strconv.FormatUint(uint64(*owner), 10))
	}
	path := "/v1/leases/" + url.PathEscape(name)
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var l api.Lease
	if err := c.Do(ctx, "DELETE", path, nil, &l, grace+15*time.Second); err != nil {
		return nil, err
	}
	return &l, nil
}

// Leases lists the shared leases (GET /v1/leases).
func (c *Client) Leases(ctx context.Context) (*api.LeasesPage, error) {
	var p api.LeasesPage
	if err := c.Do(ctx, "GET", "/v1/leases", nil, &p, 0); err != nil {
		return nil, err
	}
	return &p, nil
}

package client

import (
	"context"
	"net/url"
	"strconv"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// Mounts lists every watched mount, configured and registered (GET /v1/mounts).
func (c *Client) Mounts(ctx context.Context) (*api.MountList, error) {
	var l api.MountList
	if err := c.Do(ctx, "GET", "/v1/mounts", nil, &l, 0); err != nil {
		return nil, err
	}
	return &l, nil
}

// Mount returns one mount (GET /v1/mounts/{name}).
func (c *Client) Mount(ctx context.Context, name string) (*api.Mount, error) {
	var m api.Mount
	if err := c.Do(ctx, "GET", "/v1/mounts/"+url.PathEscape(name), nil, &m, 0); err != nil {
		return nil, err
	}
	return &m, nil
}

// RegisterMount registers a session's mount at run time (POST /v1/mounts); a name or path
// in use is a *ProblemError with code conflict.
func (c *Client) RegisterMount(ctx context.Context, req api.MountRegistration) (*api.Mount, error) {
	var m api.Mount
	if err := c.Do(ctx, "POST", "/v1/mounts", req, &m, 0); err != nil {
		return nil, err
	}
	return &m, nil
}

// PushCredentials tells the daemon the renewed credential's expiry (PUT
// /v1/mounts/{name}/credentials); the refresh schedule follows it.
func (c *Client) PushCredentials(ctx context.Context, name string, expiresAt time.Time) (*api.Mount, error) {
	var m api.Mount
	if err := c.Do(ctx, "PUT", "/v1/mounts/"+url.PathEscape(name)+"/credentials", api.CredentialPush{ExpiresAt: &expiresAt}, &m, 0); err != nil {
		return nil, err
	}
	return &m, nil
}

// ReleaseMount stops watching a registered mount and removes its links (DELETE
// /v1/mounts/{name}); unmount nil takes the mount's own setting (true for a job-tied
// mount), else it says whether to sync and unmount it too.
func (c *Client) ReleaseMount(ctx context.Context, name string, unmount *bool) (*api.MountRelease, error) {
	p := "/v1/mounts/" + url.PathEscape(name)
	if unmount != nil {
		p += "?unmount=" + strconv.FormatBool(*unmount)
	}
	var r api.MountRelease
	// An unmount may wait for a sync and up to three unmount commands.
	if err := c.Do(ctx, "DELETE", p, nil, &r, 2*time.Minute); err != nil {
		return nil, err
	}
	return &r, nil
}

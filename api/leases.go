package api

import "time"

// Shared (session) lease routes (CONTRACT §17, issue 20 item 4).
const (
	RouteLeasesList     = "GET /v1/leases"
	RouteLeaseHeartbeat = "POST /v1/leases/{name}/heartbeat"
	RouteLeaseDelete    = "DELETE /v1/leases/{name}"
)

// Lease is one shared lease: every job registered with "lease": Name lives while it is
// renewed. One heartbeat renews them all.
type Lease struct {
	Name           string    `json:"name"`
	TTLSeconds     float64   `json:"ttl_seconds"`
	LeaseExpiresAt time.Time `json:"lease_expires_at"`
	Heartbeats     int64     `json:"heartbeats"`
	// Jobs are the ids of the lease's jobs still listed, oldest first; Running how many of
	// them still run.
	Jobs    []string `json:"jobs"`
	Running int      `json:"running"`
	// Owner is the uid whose lease it is: lease names, like job ids, are each owner's own
	// (issue 21), so two uids' leases may share a name.
	Owner    *JobOwner `json:"owner,omitempty"`
	Warnings []string  `json:"warnings,omitempty"`
}

// LeasesPage is the body of GET /v1/leases.
type LeasesPage struct {
	Leases []Lease `json:"leases"`
}

package daemon

import (
	"net/http"
	"strconv"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/jobs"
)

// jobCaller is who calls a job endpoint, as the registry checks ownership (issue 21): the
// peer's uid and its process, pinned by the kernel. done releases the pin.
func jobCaller(r *http.Request) (jobs.Caller, func(), error) {
	owner, err := queryOwner(r)
	if err != nil {
		return jobs.Caller{}, func() {}, err
	}
	p := peerFrom(r.Context())
	proc, err := peerProcess(p)
	if err != nil {
		return jobs.Caller{}, func() {}, err
	}
	return jobs.Caller{UID: p.UID, Peer: proc, Owner: owner}, proc.Close, nil
}

// queryOwner is the ?owner=UID of a job or lease call: job ids and lease names are each
// owner's own (issue 21), so an id alone means the caller's job, else the only one of that
// id; ?owner= names another uid's (root may end or heartbeat it, anyone may read it).
func queryOwner(r *http.Request) (*uint32, error) {
	s := r.URL.Query().Get("owner")
	if s == "" {
		return nil, nil
	}
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return nil, api.NewProblem(api.CodeBadRequest, "query parameter \"owner\": want a uid (a number from 0 to 4294967295), got %q", s)
	}
	u := uint32(n)
	return &u, nil
}

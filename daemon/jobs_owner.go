package daemon

import (
	"net/http"

	"github.com/sandboxd/sandboxd/jobs"
)

// jobCaller is who calls a job endpoint, as the registry checks ownership (issue 21): the
// peer's uid and its process, pinned by the kernel. done releases the pin.
func jobCaller(r *http.Request) (jobs.Caller, func(), error) {
	p := peerFrom(r.Context())
	proc, err := peerProcess(p)
	if err != nil {
		return jobs.Caller{}, func() {}, err
	}
	return jobs.Caller{UID: p.UID, Peer: proc}, proc.Close, nil
}

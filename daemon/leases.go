package daemon

import (
	"net/http"

	"github.com/sandboxd/sandboxd/api"
)

// Shared (session) leases, CONTRACT §17 (jobs/lease.go): one heartbeat renews every job
// of a lease, and ending the lease ends them all.

func (d *Daemon) handleLeasesList(w http.ResponseWriter, r *http.Request) error {
	owner, err := queryOwner(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.LeasesPage{Leases: nonNil(d.jobReg.Leases(owner))})
	return nil
}

func (d *Daemon) handleLeaseHeartbeat(w http.ResponseWriter, r *http.Request) error {
	extend, warnings, by, done, err := heartbeatRequest(r, "lease")
	if err != nil {
		return err
	}
	defer done()
	l, err := d.jobReg.HeartbeatLease(r.PathValue("name"), extend, by)
	if err != nil {
		return err
	}
	d.touchActivity()
	l.Warnings = append(l.Warnings, warnings...)
	writeJSON(w, http.StatusOK, l)
	return nil
}

// handleLeaseDelete ends every job of the lease and answers once all their cgroups are
// empty (?wait=false: at once).
func (d *Daemon) handleLeaseDelete(w http.ResponseWriter, r *http.Request) error {
	wait, err := queryBool(r, "wait", true)
	if err != nil {
		return err
	}
	by, done, err := jobCaller(r)
	if err != nil {
		return err
	}
	defer done()
	l, err := d.jobReg.EndLease(r.Context(), r.PathValue("name"), wait, by)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, l)
	return nil
}

package daemon

import (
	"context"
	"net/http"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/reclaim"
)

// handleResume is POST /v1/resume (CONTRACT §6): probe mounts and refresh due
// credentials, then run the reclaim policy; a resume within 10 s of a completed one
// answers that run's result (cached: true).
func (d *Daemon) handleResume(w http.ResponseWriter, r *http.Request) error {
	var req api.ResumeRequest
	warnings, err := api.DecodeRequest(r.Body, &req)
	if err != nil {
		return err
	}
	deadline := 30 * time.Second
	if req.Deadline != nil {
		deadline = req.Deadline.D()
	}
	ctx, cancel := context.WithTimeout(r.Context(), deadline)
	defer cancel()
	c := d.current()
	mountActions := c.mounts.Resume(ctx)
	run, err := c.reclaim.Resume(ctx)
	if err != nil {
		return d.reclaimProblem(err, c, deadline)
	}
	run.Actions = append(mountActions, run.Actions...)
	run.Actions = nonNil(run.Actions)
	run.Warnings = append(run.Warnings, warnings...)
	writeJSON(w, http.StatusOK, run)
	return nil
}

// handleReclaim is POST /v1/reclaim: plan (dry_run) or perform a reclaim now.
func (d *Daemon) handleReclaim(w http.ResponseWriter, r *http.Request) error {
	var req api.ReclaimRequest
	warnings, err := api.DecodeRequest(r.Body, &req)
	if err != nil {
		return err
	}
	// A dry run changes nothing and is open to readers of the Unix socket (the loopback
	// TCP listener serves no POST at all); a real reclaim is for writers.
	if p := peerFrom(r.Context()); !req.DryRun || p.TCP {
		if prob := d.authorize(r); prob != nil {
			return prob
		}
	}
	if !req.DryRun {
		defer d.statusCache.invalidate()
	}
	deadline := 60 * time.Second
	if req.Deadline != nil {
		deadline = req.Deadline.D()
	}
	ctx, cancel := context.WithTimeout(r.Context(), deadline)
	defer cancel()
	var target int64
	if req.TargetFree != nil {
		target = int64(*req.TargetFree)
	}
	c := d.current()
	run, err := c.reclaim.Reclaim(ctx, reclaim.Request{Trigger: reclaim.TriggerManual, DryRun: req.DryRun,
		TargetFree: target, ReleaseReserve: req.ReleaseReserve, Reason: req.Reason})
	if err != nil {
		return d.reclaimProblem(err, c, deadline)
	}
	run.Actions = nonNil(run.Actions)
	run.Warnings = append(run.Warnings, warnings...)
	writeJSON(w, http.StatusOK, run)
	return nil
}

func firstFS(fss []api.Filesystem) api.Filesystem {
	if len(fss) == 0 {
		return api.Filesystem{}
	}
	return fss[0]
}

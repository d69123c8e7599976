package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/reclaim"
	"github.com/sandboxd/sandboxd/retention"
)

// launchPruneBudget bounds how many files one launch call deletes itself; the rest of a
// backlog drains in the background (FIELD-NOTES: unlink costs up to ~340 µs on ext4).
const launchPruneBudget = 256

// handleLaunch is POST /v1/launch (CONTRACT §5).
func (d *Daemon) handleLaunch(w http.ResponseWriter, r *http.Request) error {
	start := time.Now()
	var req api.LaunchRequest
	warnings, err := api.DecodeRequest(r.Body, &req)
	if err != nil {
		d.metrics.launchDone(string(asProblem(err).Code), start)
		return err
	}
	resp, err := d.Launch(r.Context(), req)
	if err != nil {
		p := asProblem(err)
		p.Warnings = append(p.Warnings, warnings...)
		d.metrics.launchDone(string(p.Code), start)
		if p.Code != api.CodeBadRequest && p.Code != api.CodeNotFound {
			subject := req.Site
			if subject == "" {
				subject = "launch"
			}
			d.events.Record(api.Event{Kind: api.EventRefusal, Subject: subject, Message: "launch refused: " + p.Detail,
				Fields: map[string]any{"code": string(p.Code)}})
		}
		return p
	}
	resp.Warnings = append(resp.Warnings, warnings...)
	d.metrics.launchDone("ok", start)
	writeJSON(w, http.StatusOK, resp)
	return nil
}

// Launch runs the write-site policy: bounded retention on the site, the space check
// (with reclaim when below the thresholds), and the mount check. A refusal is *api.Problem.
func (d *Daemon) Launch(ctx context.Context, req api.LaunchRequest) (*api.LaunchResponse, error) {
	cfg := d.config()
	c := d.current()
	deadline := cfg.Launch.Deadline
	if req.Deadline != nil {
		deadline = req.Deadline.D()
	}
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	needBytes := uint64(cfg.Launch.NeedBytes)
	if req.NeedBytes != nil {
		needBytes = uint64(*req.NeedBytes)
	}
	needInodes := cfg.Launch.NeedInodes
	if req.NeedInodes != nil {
		needInodes = *req.NeedInodes
	}

	// One mount check serves the whole call (it reads the watcher's last verdicts, never
	// the mounts). Unknown names first: not_found outranks every other refusal.
	mounts, unknownMounts, mdetail, mok := c.mounts.Check(req.Mounts)
	if len(unknownMounts) > 0 {
		return nil, api.NewProblem(api.CodeNotFound, "unknown mount(s) %s: configured mounts are named in [[mount]]",
			strings.Join(unknownMounts, ", "))
	}
	resp := &api.LaunchResponse{OK: true, PrunedJobs: []string{}, Mounts: []api.Mount{}}
	var notes []string
	path := ""
	siteName := req.Site
	if siteName != "" || len(c.sites.SiteNames()) == 1 {
		pr, err := c.sites.Prune(ctx, siteName, launchPruneBudget)
		if errors.Is(err, retention.ErrUnknownSite) {
			return nil, api.NewProblem(api.CodeNotFound, "%v", err)
		}
		if err != nil && ctx.Err() == nil {
			notes = append(notes, fmt.Sprintf("prune failed: %v", err))
		}
		site, serr := c.sites.Site(pr.Site)
		if serr == nil {
			resp.Site = &site
			path = site.Path
			siteName = site.Name
		}
		resp.Pruned, resp.FreedBytes = pr.Files, pr.Bytes
		if pr.Jobs != nil {
			resp.PrunedJobs = pr.Jobs
		}
		verb := "pruned"
		if pr.Observed {
			verb = "would prune (observe mode)"
		}
		notes = append(notes, fmt.Sprintf("site %s holds %s files; %s %d files (%s) in this call",
			siteName, api.FormatCount(uint64(max(site.Files, 0))), verb, pr.Files, api.FormatSize(uint64(max(pr.Bytes, 0)))))
		if pr.Pending > 0 {
			notes = append(notes, fmt.Sprintf("%d expired files left to the background drain", pr.Pending))
		}
		if pr.Problem != "" {
			notes = append(notes, "site not cleaned: "+pr.Problem)
		}
	} else if len(c.sites.SiteNames()) > 1 {
		return nil, api.NewProblem(api.CodeBadRequest, "field \"site\": required when several sites are configured (%s)",
			strings.Join(c.sites.SiteNames(), ", "))
	}
	if path == "" && len(cfg.Filesystems) > 0 {
		path = cfg.Filesystems[0].Path
	}

	fs, err := c.pressure.Measure(ctx, existingAncestor(path))
	if err != nil {
		return nil, api.NewProblem(api.CodeInternal, "statfs %s: %v", path, err)
	}
	if short(fs, needBytes, needInodes) || belowReclaim(fs) {
		run, rerr := c.reclaim.Reclaim(ctx, reclaim.Request{Trigger: "launch", NeedBytes: int64(needBytes),
			NeedInodes: needInodes, Filesystems: []string{fs.Path}})
		switch {
		case errors.Is(rerr, reclaim.ErrBusy):
			if short(fs, needBytes, needInodes) {
				return nil, d.busyProblem(fs, notes)
			}
		case rerr != nil:
			notes = append(notes, fmt.Sprintf("reclaim failed: %v", rerr))
		default:
			notes = append(notes, fmt.Sprintf("reclaim freed %s and %d files (verdict %s)",
				api.FormatSize(uint64(max(run.FreedBytes, 0))), run.FreedFiles, run.Verdict))
		}
		if m, err := c.pressure.Measure(context.WithoutCancel(ctx), existingAncestor(path)); err == nil {
			fs = m
		}
	}
	resp.Filesystem = &fs

	var fails []*api.Problem
	if short(fs, needBytes, needInodes) {
		fails = append(fails, spaceProblem(fs, needBytes, needInodes, notes))
	}
	resp.Mounts = nonNil(mounts)
	if !mok {
		fails = append(fails, api.NewProblem(api.CodeMountUnavailable, "%s", mdetail))
	}
	if len(fails) > 0 {
		return nil, mergeProblems(fails, &fs, resp.Mounts)
	}
	if belowReplace(fs) {
		a := "replace"
		resp.Advice = &a
		notes = append(notes, replaceNote(fs))
	}
	resp.Detail = fsFingerprint(fs) + "; " + strings.Join(notes, "; ")
	return resp, nil
}

func short(fs api.Filesystem, needBytes, needInodes uint64) bool {
	return fs.AvailBytes < needBytes || (fs.Files > 0 && fs.FilesFree < needInodes)
}

func belowReclaim(fs api.Filesystem) bool {
	return fs.AvailBytes < fs.ReclaimThresholdBytes || (fs.Files > 0 && fs.FilesFree < fs.ReclaimThresholdFiles)
}

func belowReplace(fs api.Filesystem) bool {
	return fs.AvailBytes < fs.ReplaceThresholdBytes || (fs.Files > 0 && fs.FilesFree < fs.ReplaceThresholdFiles)
}

func replaceNote(fs api.Filesystem) string {
	if fs.AvailBytes < fs.ReplaceThresholdBytes {
		return fmt.Sprintf("below filesystem.replace_below %s: replace this sandbox", api.FormatSize(fs.ReplaceThresholdBytes))
	}
	return fmt.Sprintf("below filesystem.replace_below_inodes %s inodes: replace this sandbox", api.FormatCount(fs.ReplaceThresholdFiles))
}

// spaceProblem is the refusal for a call whose needs do not fit: replace_sandbox when
// the filesystem is below a replace threshold, else disk_full or inodes_exhausted.
func spaceProblem(fs api.Filesystem, needBytes, needInodes uint64, notes []string) *api.Problem {
	code := api.CodeInodesExhausted
	if fs.AvailBytes < needBytes {
		code = api.CodeDiskFull
	}
	var what []string
	if fs.AvailBytes < needBytes {
		what = append(what, fmt.Sprintf("the call needs %s free", api.FormatSize(needBytes)))
	}
	if fs.Files > 0 && fs.FilesFree < needInodes {
		what = append(what, fmt.Sprintf("the call needs %d free inodes", needInodes))
	}
	if belowReplace(fs) {
		code = api.CodeReplaceSandbox
		what = append(what, replaceNote(fs))
	} else if fs.AvailBytes < fs.ReclaimThresholdBytes {
		what = append(what, fmt.Sprintf("below filesystem.reclaim_below %s", api.FormatSize(fs.ReclaimThresholdBytes)))
	}
	parts := append([]string{fsFingerprint(fs)}, notes...)
	parts = append(parts, what...)
	p := api.NewProblem(code, "%s", strings.Join(parts, "; "))
	return p
}

func (d *Daemon) busyProblem(fs api.Filesystem, notes []string) *api.Problem {
	parts := append([]string{fsFingerprint(fs)}, notes...)
	parts = append(parts, "the call's deadline passed while another reclaim held the lock")
	p := api.NewProblem(api.CodeBusy, "%s", strings.Join(parts, "; "))
	p.RetryAfterSeconds = 2
	return p
}

// mergeProblems answers the first problem in CONTRACT §3's order with a detail that
// names every failure.
func mergeProblems(ps []*api.Problem, fs *api.Filesystem, mounts []api.Mount) *api.Problem {
	best := ps[0]
	var details []string
	for _, p := range ps {
		if p.Code.Precedence() < best.Code.Precedence() {
			best = p
		}
	}
	details = append(details, best.Detail)
	for _, p := range ps {
		if p != best {
			details = append(details, "also "+string(p.Code)+": "+p.Detail)
		}
	}
	out := api.NewProblem(best.Code, "%s", strings.Join(details, "; "))
	out.Filesystem = fs
	out.Mounts = mounts
	out.RetryAfterSeconds = best.RetryAfterSeconds
	return out
}

// existingAncestor is path, or its nearest existing parent: a site the launcher has not
// created yet is checked on the filesystem it will be created on.
func existingAncestor(path string) string {
	for p := path; ; p = filepath.Dir(p) {
		if _, err := os.Lstat(p); err == nil || p == "/" || p == "." {
			return p
		}
	}
}

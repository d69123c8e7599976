package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// mountsCommand is `sandboxd mounts`: runtime mounts (CONTRACT §12) for shell runners.
func mountsCommand() *command {
	return &command{name: "mounts", summary: "runtime mounts: list, add (register a session's mount), rm, push credentials",
		deflt: "list",
		subs: []*command{
			{name: "list", summary: "every watched mount, configured and registered, with job, credential expiry and state",
				globals: gClient, maxArgs: 0, run: runMountsList},
			mountsAddCommand(),
			{name: "rm", summary: "release a registered mount: stop watching it, remove its links, and unmount it if asked",
				args: "NAME", minArgs: 1, maxArgs: 1, globals: gClient,
				long: `Without --unmount or --keep-mounted the mount's own setting applies: a mount registered with
--job is synced and unmounted (umount, then fusermount3 -u, a lazy umount only as the last
resort), any other is left mounted.`,
				setup: func(fs *flag.FlagSet) runFunc {
					unmount := fs.Bool("unmount", false, "also sync and unmount it")
					keep := fs.Bool("keep-mounted", false, "leave it mounted")
					return func(ctx context.Context, inv *invocation) int {
						if *unmount && *keep {
							return inv.usageErr("give --unmount or --keep-mounted, not both")
						}
						var u *bool
						switch {
						case *unmount:
							u = unmount
						case *keep:
							f := false
							u = &f
						}
						return runMountsRm(ctx, inv, inv.args[0], u)
					}
				}},
			{name: "push", summary: "push a renewed credential's expiry: the refresh schedule follows it",
				args: "NAME", minArgs: 1, maxArgs: 1, globals: gClient,
				setup: func(fs *flag.FlagSet) runFunc {
					exp := fs.String("expires-at", "", "the renewed credential's expiry, `RFC3339` (or --expires-in)")
					in := fs.Duration("expires-in", 0, "the renewed credential expires this `DURATION` from now")
					return func(ctx context.Context, inv *invocation) int {
						t, code, ok := expiry(inv, *exp, *in)
						if !ok {
							return code
						}
						if t == nil {
							return inv.usageErr("--expires-at or --expires-in is required")
						}
						m, err := inv.client().PushCredentials(ctx, inv.args[0], *t)
						if err != nil {
							return failure(err, inv, inv.disks())
						}
						return printMount(inv, m)
					}
				}},
		}}
}

func mountsAddCommand() *command {
	return &command{name: "add", summary: "register a session's FUSE mount, watched as a [[mount]] and released with its job",
		args: "NAME PATH", minArgs: 2, maxArgs: 2, globals: gClient,
		long: `Commands are shell command lines (run with /bin/sh -c). A refresh command of a mount without
--credential-file prints the renewed expiry as a JSON line with "Expiration" (the AWS
credential_process shape). Exit 65 for a name or path in use, 78 for a job that does not run.`,
		setup: func(fs *flag.FlagSet) runFunc {
			job := fs.String("job", "", "the job `ID` the mount belongs to: released when the job ends")
			required := fs.Bool("required", false, "every launch on the host needs it healthy (default: only launches that name it, with --mount)")
			optional := fs.Bool("optional", false, "only launches that name it need it healthy (the default; kept for scripts that say it)")
			exp := fs.String("expires-at", "", "when the mount's credential expires, `RFC3339`")
			in := fs.Duration("expires-in", 0, "the mount's credential expires this `DURATION` from now")
			credFile := fs.String("credential-file", "", "JSON `FILE` with \"Expiration\", re-read when it changes")
			refresh := fs.String("refresh-command", "", "shell `COMMAND` that renews the credential at refresh_at")
			remount := fs.String("remount-command", "", "shell `COMMAND` that remounts it")
			unit := fs.String("remount-unit", "", "systemd `UNIT` to restart to remount it")
			interval := fs.Duration("probe-interval", 0, "time between probes (default 5s)")
			probeTimeout := fs.Duration("probe-timeout", 0, "a probe slower than this `DURATION` counts as hung (default 5s)")
			refreshAt := fs.Float64("refresh-at", 0, "refresh the credential at this `FRACTION` of its lifetime, between 0 and 1 (default 0.8)")
			maxRemounts := fs.Int("max-remounts-per-hour", 0, "remounts beyond this `N` wait for the next hour; 0 = never remount (default 6)")
			remountTimeout := fs.Duration("remount-timeout", 0, "a remount's bound: the unit restart or command start, then the wait for the first healthy probe (default 1m)")
			canary := fs.Bool("canary", false, "probe with a canary file: create, write, fsync, unlink (the default)")
			noCanary := fs.Bool("no-canary", false, "probe with lookup and readdir only, no canary file")
			guard := fs.Bool("guard", false, "keep the bare mountpoint immutable while nothing is mounted")
			keep := fs.Bool("keep-mounted", false, "a release leaves it mounted (default for a mount without --job: true)")
			var links multiFlag
			fs.Var(&links, "link", "a symlink `PATH=TARGET` outside the mount, kept pointing into it (repeatable)")
			return func(ctx context.Context, inv *invocation) int {
				req := api.MountRegistration{Name: inv.args[0], Path: inv.args[1], Job: *job, CredentialFile: *credFile,
					RemountUnit: *unit, RefreshCommand: shell(*refresh), RemountCommand: shell(*remount)}
				t, code, ok := expiry(inv, *exp, *in)
				if !ok {
					return code
				}
				req.CredentialExpiresAt = t
				if *required && *optional {
					return inv.usageErr("give --required or --optional, not both")
				}
				if *canary && *noCanary {
					return inv.usageErr("give --canary or --no-canary, not both")
				}
				fs.Visit(func(f *flag.Flag) {
					switch f.Name {
					case "required":
						req.Required = required
					case "optional":
						r := !*optional
						req.Required = &r
					case "probe-interval":
						req.ProbeInterval = ptrDuration(*interval)
					case "probe-timeout":
						req.ProbeTimeout = ptrDuration(*probeTimeout)
					case "remount-timeout":
						req.RemountTimeout = ptrDuration(*remountTimeout)
					case "refresh-at":
						req.RefreshAt = refreshAt
					case "max-remounts-per-hour":
						req.MaxRemountsPerHour = maxRemounts
					case "canary":
						req.Canary = canary
					case "no-canary":
						c := !*noCanary
						req.Canary = &c
					case "guard":
						req.Guard = guard
					case "keep-mounted":
						u := !*keep
						req.Unmount = &u
					}
				})
				for _, l := range links {
					p, target, found := strings.Cut(l, "=")
					if !found || p == "" || target == "" {
						return inv.usageErr("--link %q: want PATH=TARGET", l)
					}
					req.Links = append(req.Links, api.LinkSpec{Path: p, Target: target})
				}
				m, err := inv.client().RegisterMount(ctx, req)
				if err != nil {
					return failure(err, inv, []string{req.Path})
				}
				return printMount(inv, m)
			}
		}}
}

func ptrDuration(d time.Duration) *api.Duration { v := api.Duration(d); return &v }

// shell is argv for a shell command line ("" = none).
func shell(s string) []string {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	return []string{"/bin/sh", "-c", s}
}

// expiry reads --expires-at or --expires-in (nil when neither is given).
func expiry(inv *invocation, at string, in time.Duration) (*time.Time, int, bool) {
	switch {
	case at != "" && in != 0:
		return nil, inv.usageErr("give --expires-at or --expires-in, not both"), false
	case at != "":
		t, err := time.Parse(time.RFC3339, at)
		if err != nil {
			return nil, inv.usageErr("--expires-at %q: want RFC 3339, such as %s", at, time.Now().Add(15*time.Minute).UTC().Format(time.RFC3339)), false
		}
		return &t, 0, true
	case in < 0:
		return nil, inv.usageErr("--expires-in %s is negative", api.FormatDuration(in)), false
	case in > 0:
		t := time.Now().Add(in).UTC().Truncate(time.Second)
		return &t, 0, true
	}
	return nil, 0, true
}

func runMountsList(ctx context.Context, inv *invocation) int {
	l, err := inv.client().Mounts(ctx)
	if err != nil {
		return failure(err, inv, inv.disks())
	}
	if inv.g.json {
		printJSON(inv.stdout, l)
		return exitOK
	}
	fmt.Fprintf(inv.stdout, "%d registered of at most %d ([mounts] max_registered)\n", l.Registered, l.MaxRegistered)
	printMountLines(inv.stdout, l.Mounts, time.Now())
	return exitOK
}

func runMountsRm(ctx context.Context, inv *invocation, name string, unmount *bool) int {
	r, err := inv.client().ReleaseMount(ctx, name, unmount)
	if err != nil {
		return failure(err, inv, inv.disks())
	}
	if inv.g.json {
		printJSON(inv.stdout, r)
		return exitOK
	}
	for _, s := range r.Steps {
		fmt.Fprintf(inv.stdout, "  %-12s %-8s %s\n", s.Step, s.Result, s.Detail)
	}
	verdict := "released " + name + "; left mounted"
	switch {
	case r.Unmounted:
		verdict = "released " + name + "; unmounted"
	case nothingMounted(r.Steps) || r.Mount.State == api.MountMissing:
		// Not "left mounted" for a path where nothing was mounted (state missing).
		verdict = "released " + name + "; nothing was mounted there"
	case unmountAsked(r.Steps):
		verdict = "released " + name + "; NOT unmounted (see the steps above)"
	}
	fmt.Fprintln(inv.stdout, verdict)
	return exitOK
}

func nothingMounted(steps []api.ReleaseStep) bool {
	for _, s := range steps {
		if s.Step == "umount" && s.Result == "skipped" && strings.HasPrefix(s.Detail, "no FUSE mount on") {
			return true
		}
	}
	return false
}

func unmountAsked(steps []api.ReleaseStep) bool {
	for _, s := range steps {
		if s.Step == "umount" || s.Step == "abort" || s.Step == "sync" {
			return true
		}
	}
	return false
}

func printMount(inv *invocation, m *api.Mount) int {
	if inv.g.json {
		printJSON(inv.stdout, m)
		return exitOK
	}
	printMountLines(inv.stdout, []api.Mount{*m}, time.Now())
	return exitOK
}

// printMountLines prints one line per mount: name, path, state, errno, since, where it
// comes from (configured, or registered for a job), remounts and the credential's expiry;
// status shares it.
func printMountLines(w io.Writer, ms []api.Mount, now time.Time) {
	for _, m := range ms {
		origin := "configured"
		if m.Registered {
			origin = "registered"
			if m.RegisteredBy != nil && m.RegisteredBy.UID != 0 {
				origin += fmt.Sprintf(" by uid %d", m.RegisteredBy.UID)
			}
			if m.Job != "" {
				origin += " for job " + m.Job
			}
		}
		if m.Required {
			origin += ", required"
		}
		errno := ""
		if m.Errno != "" {
			errno = " " + m.Errno
		}
		cred := ""
		if m.CredentialExpiresAt != nil {
			cred = ", credential expires " + ago(*m.CredentialExpiresAt, now)
			if !m.CredentialExpiresAt.After(now) {
				cred = ", credential EXPIRED " + ago(*m.CredentialExpiresAt, now)
			}
		}
		recovery := ""
		if m.Recovery != "" {
			recovery = ", recovery: " + m.Recovery
		}
		fmt.Fprintf(w, "  %-12s %s %s%s since %s (%s), %s remounts%s%s\n", m.Name, m.Path, strings.ToUpper(m.State), errno,
			ago(m.Since, now), origin, count(m.RemountsTotal), cred, recovery)
	}
}

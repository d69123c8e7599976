package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/internal/mountinfo"
)

// releaseAllCommand is what the Debian package's prerm runs on removal (issue 25): a
// removed sandboxd must not leave the jobs it started running for ever with no lease, no
// unit and no state, nor registered mounts watched by nobody.
func releaseAllCommand() *command {
	return &command{name: "release-all", summary: "end every job and release every registered mount (package removal)",
		globals: gClient | gConfig,
		long: `Asks the daemon to end every job (SIGTERM, SIGKILL after the job's grace, answered once
its cgroup is empty) and to release every mount registered at run time (stop watching it,
remove its links). Then, whether or not the daemon answered, it ends what is left in the
jobs' cgroups itself (<cgroup root>/jobs/*: SIGTERM, SIGKILL after [jobs] grace, until
empty) and removes those cgroups. The cgroup root is the daemon's, else [jobs]
cgroup_root of --config, else the packaged unit's cgroup and <cgroup2>/sandboxd.
Every step is printed. Exit 0 when nothing is left, 1 when a cgroup could not be emptied.`,
		run: runReleaseAll}
}

func runReleaseAll(ctx context.Context, inv *invocation) int {
	grace := 10 * time.Second
	var roots []string
	path := inv.g.config
	if path == "" {
		path = config.DefaultPath
	}
	if cfg, err := config.LoadOrDefault(path); err == nil {
		grace = cfg.Jobs.Grace
		if cfg.Jobs.CgroupRoot != "" {
			roots = append(roots, cfg.Jobs.CgroupRoot)
		}
	}
	say := func(format string, a ...any) { fmt.Fprintf(inv.stdout, "sandboxd release-all: "+format+"\n", a...) }

	c := inv.client()
	if page, err := c.Jobs(ctx); err != nil {
		say("the daemon does not answer (%v): ending jobs through their cgroups", err)
	} else {
		if page.Root != "" {
			roots = append([]string{page.Root}, roots...)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		for _, j := range page.Jobs {
			if j.State != api.JobRunning && j.State != api.JobEnding && j.State != api.JobLeaked {
				continue
			}
			wg.Add(1)
			go func(id string, grace time.Duration) {
				defer wg.Done()
				ended, err := c.EndJob(ctx, id, true, grace)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					say("job %s: %v", id, err)
				} else {
					say("ended job %s: %s", id, ended.State)
				}
			}(j.ID, time.Duration(j.GraceSeconds*float64(time.Second)))
		}
		wg.Wait()
		if ml, err := c.Mounts(ctx); err == nil {
			for _, m := range ml.Mounts {
				if m.RegisteredBy == nil {
					continue // configured in the file: not the runners' to hand back
				}
				if _, err := c.ReleaseMount(ctx, m.Name, nil); err != nil {
					say("mount %s (%s): %v", m.Name, m.Path, err)
				} else {
					say("released mount %s (%s): no longer watched, its links removed", m.Name, m.Path)
				}
			}
		}
	}
	if len(roots) == 0 {
		if mount, err := cgroup2Mount(); err == nil {
			roots = append(roots, filepath.Join(mount, "system.slice", "sandboxd.service"), filepath.Join(mount, "sandboxd"))
		}
	}
	failed := false
	seen := map[string]bool{}
	for _, root := range roots {
		if seen[root] {
			continue
		}
		seen[root] = true
		if !sweepJobCgroups(ctx, filepath.Join(root, "jobs"), grace, say) {
			failed = true
		}
	}
	if failed {
		return 1
	}
	return exitOK
}

func cgroup2Mount() (string, error) {
	entries, err := mountinfo.Read("/proc")
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		if e.FSType == "cgroup2" {
			return e.MountPoint, nil
		}
	}
	return "", errors.New("no cgroup2 filesystem mounted")
}

// sweepJobCgroups ends the processes left in each cgroup under jobsDir (SIGTERM, then
// SIGKILL after grace, waiting until empty) and removes the cgroups. It reports whether
// every one could be emptied.
func sweepJobCgroups(ctx context.Context, jobsDir string, grace time.Duration, say func(string, ...any)) bool {
	ents, err := os.ReadDir(jobsDir)
	if err != nil {
		return true // no such root: nothing of ours there
	}
	ok := true
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(jobsDir, e.Name())
		if n := signalCgroup(dir, unix.SIGTERM); n > 0 {
			say("job cgroup %s: SIGTERM to %d processes", dir, n)
			if !waitEmpty(ctx, dir, grace) {
				if err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0); err != nil {
					signalCgroup(dir, unix.SIGKILL) // before Linux 5.14: no cgroup.kill
				}
				say("job cgroup %s: still running after %s: SIGKILL", dir, grace)
				if !waitEmpty(ctx, dir, 10*time.Second) {
					say("job cgroup %s: processes left after SIGKILL (in uninterruptible sleep?): left in place", dir)
					ok = false
					continue
				}
			}
		}
		if err := removeCgroupTree(dir); err != nil {
			say("job cgroup %s: %v", dir, err)
			ok = false
			continue
		}
		say("job cgroup %s: empty, removed", dir)
	}
	// The jobs directory itself goes once empty; a running daemon makes it again.
	unix.Rmdir(jobsDir) // by path: rmdir on cgroupfs removes only an empty cgroup, never a file
	return ok
}

// signalCgroup signals every process of dir and its descendants through a pidfd, after
// checking the pid is still in that cgroup, so a pid that exited and was reused by
// another process in between is never signalled. It returns how many it signalled.
func signalCgroup(dir string, sig unix.Signal) int {
	n := 0
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		b, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(f)
			if err != nil {
				continue
			}
			fd, err := unix.PidfdOpen(pid, 0)
			if err != nil {
				continue
			}
			if stillIn(pid, p) && unix.PidfdSendSignal(fd, sig, nil, 0) == nil {
				n++
			}
			unix.Close(fd)
		}
		return nil
	})
	return n
}

// stillIn reports whether pid's cgroup v2 path ends with the cgroup dir's own path
// below the mount (a namespace may show a shorter prefix).
func stillIn(pid int, dir string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return false
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if p, ok := bytes.CutPrefix(line, []byte("0::")); ok {
			return len(p) > 1 && strings.HasSuffix(dir, string(p))
		}
	}
	return false
}

// waitEmpty waits until dir's cgroup.events says "populated 0", for at most d.
func waitEmpty(ctx context.Context, dir string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
		if err != nil || bytes.Contains(b, []byte("populated 0")) {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// removeCgroupTree removes dir and its child cgroups, deepest first.
func removeCgroupTree(dir string) error {
	var dirs []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		// by path: rmdir on cgroupfs removes only an empty cgroup (EBUSY while a process
		// is in it); there are no files to lose.
		if err := unix.Rmdir(dirs[i]); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("rmdir %s: %w", dirs[i], err)
		}
	}
	return nil
}

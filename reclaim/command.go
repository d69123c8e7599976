package reclaim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/redact"
	"github.com/sandboxd/sandboxd/internal/runas"
)

// maxOutput is how much of a command's output is kept for its error message.
const maxOutput = 4 << 10

// commandFor returns the gc (rung 2) or wipe (rung 4) command of a cache, or nil.
func commandFor(c *cache, wipe bool) []string {
	if wipe {
		return expandArgs(c.kind.wipe, c.Path)
	}
	if len(c.Command) > 0 {
		return expandArgs(c.Command, c.Path)
	}
	return expandArgs(c.kind.gc, c.Path)
}

// idle says why a cache's tool must not run now ("" when it may): another instance of the
// tool holds its lock, or a pnpm store server serves the store.
func (r *Reclaimer) idle(c *cache) string {
	switch c.kind.name {
	case "apt":
		if lockHeld(r.opts.ProcRoot, r.opts.DpkgLock) {
			return fmt.Sprintf("dpkg lock %s is held", r.opts.DpkgLock)
		}
	case "pnpm":
		// pnpm writes <store>/v*/server/server.json while a store server runs, and refuses
		// `store prune` then.
		if m, _ := filepath.Glob(filepath.Join(c.Path, "v*", "server", "server.json")); len(m) > 0 {
			return "a pnpm store server is running (" + m[0] + ")"
		}
	}
	return ""
}

// runCommand runs argv for cache c as the root's owner with the kind's environment, in a
// process group of its own that is killed at the timeout. It reports an event either way.
func (r *Reclaimer) runCommand(ctx context.Context, c *cache, argv []string, uid, gid uint32) error {
	if len(argv) == 0 {
		return errors.New("empty command")
	}
	bin, err := r.opts.LookPath(argv[0])
	if err != nil {
		return fmt.Errorf("%s not installed: %w", argv[0], err)
	}
	callCtx := ctx
	ctx, cancel := context.WithTimeout(ctx, r.opts.CommandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, argv[1:]...)
	cmd.Dir = c.Path
	cmd.Env = r.commandEnv(c, bin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.SysProcAttr.Credential = runas.Credential(uid, gid) // nil: the daemon's own ids
	// Kill the whole group: a tool that forks (npm, pnpm) must not outlive its timeout.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout = &capped{b: &out}
	cmd.Stderr = cmd.Stdout
	start := time.Now()
	err = cmd.Run()
	took := time.Since(start)
	switch {
	case err != nil && callCtx.Err() != nil:
		// The call's own deadline came first: say so, not the command timeout it never reached.
		err = fmt.Errorf("killed after %s at the call's deadline: %w", api.FormatDuration(took), callCtx.Err())
	case err != nil && ctx.Err() != nil:
		err = fmt.Errorf("killed after %s (reclaim's command timeout %s): %w", api.FormatDuration(took), api.FormatDuration(r.opts.CommandTimeout), ctx.Err())
	case err != nil:
		// The tool's output says why it failed; it passes through the same redaction as a
		// mount's refresh output (issue 21): a tool may echo a registry token or a key.
		err = fmt.Errorf("%w: %s", err, redact.String(strings.TrimSpace(out.String())))
	}
	// argv is root's config, shown as written (config show shows it too); redacting it
	// would garble the long cache paths it names.
	shown := strings.Join(argv, " ")
	fields := map[string]any{"command": shown, "cache": c.Path, "uid": uid, "seconds": took.Seconds()}
	msg := fmt.Sprintf("ran %s for %s", shown, c.Path)
	if err != nil {
		fields["error"] = err.Error()
		msg = fmt.Sprintf("%s: %v", msg, err)
	}
	r.emit(api.EventCommand, c.Name, msg, fields)
	if err != nil {
		return fmt.Errorf("run %s for %s: %w", shown, c.Path, err)
	}
	return nil
}

// commandEnv is a minimal environment: PATH with the tool's own directory, HOME of the
// cache's home, and the kind's variables that pin the tool to this cache.
func (r *Reclaimer) commandEnv(c *cache, bin string) []string {
	env := []string{
		"PATH=" + filepath.Dir(bin) + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=" + c.home,
		"LC_ALL=C",
		"SANDBOXD_CACHE=" + c.Path,
	}
	if c.kind.env != nil {
		env = append(env, c.kind.env(c.Path, c.home)...)
	}
	return env
}

// capped is a writer that keeps the first maxOutput bytes.
type capped struct{ b *bytes.Buffer }

func (w *capped) Write(p []byte) (int, error) {
	if room := maxOutput - w.b.Len(); room > 0 {
		w.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// vmBox is issue 22's sandbox with real parts: a 64 MiB ext4 image, loop-mounted, is the
// sandbox's disk (a MicroVM's /dev/vdb); the root is an overlayfs built as guest init
// builds it (lower read-only, upper and work on the disk); the daemon watches the disk.
type vmBox struct {
	t               *testing.T
	img, lower, dir string // dir: the daemon's config, socket and state (not on the disk)
	disk, root      string
	unmountDisk     func() error
	rootMounted     bool
	fsBody, cfgPath string
	daemon          *exec.Cmd
	sock            string
	boots           int
}

const vmSizeSetting = "[openshell.drivers.vm] overlay_disk_mib"

func newVMBox(t *testing.T) *vmBox {
	testenv.RequireRoot(t)
	b := &vmBox{t: t, img: testenv.Ext4Image(t, 64<<20), lower: t.TempDir(), dir: t.TempDir()}
	os.MkdirAll(filepath.Join(b.lower, "etc"), 0o755)
	os.MkdirAll(filepath.Join(b.lower, "home", "agent"), 0o755)
	os.WriteFile(filepath.Join(b.lower, "etc", "passwd"), []byte("root:x:0:0::/root:/bin/sh\n"), 0o644)
	b.root = t.TempDir()
	b.mountDisk()
	for _, d := range []string{"upper", "work"} {
		if err := os.Mkdir(filepath.Join(b.disk, d), 0o755); err != nil {
			t.Fatalf("the overlay's %s dir on the disk: %v", d, err)
		}
	}
	b.fsBody = fmt.Sprintf(`site = []
[[filesystem]]
path = %q
reclaim_below = "12MiB"
replace_below = "4MiB"
reserve = "8MiB"
size_setting = %q
`, b.disk, vmSizeSetting)
	return b
}

// mountDisk loop-mounts the image at a fixed path per box, so the config's path stays
// right across stops (a VM's /dev/vdb is always mounted at the same place).
func (b *vmBox) mountDisk() {
	dir, unmount := testenv.LoopMount(b.t, b.img)
	if b.disk == "" {
		b.disk = filepath.Join(b.dir, "disk")
		os.Mkdir(b.disk, 0o755)
	}
	// Move the mount to the box's fixed path (a bind would keep two mounts).
	if err := unix.Mount(dir, b.disk, "", unix.MS_MOVE, ""); err != nil {
		unmount()
		b.t.Fatalf("move the disk mount to %s: %v", b.disk, err)
	}
	disk := b.disk
	b.unmountDisk = func() error {
		if err := unix.Unmount(disk, 0); err != nil {
			return err
		}
		// The loop device was set up with autoclear: it goes with the last unmount.
		// testenv's own cleanup of dir finds nothing mounted there and detaches leftovers.
		unmount()
		return nil
	}
	b.t.Cleanup(func() { b.unmountDisk() })
}

// initRoot is guest init: build the overlay root, `touch /newroot/etc/passwd` (the write
// that failed) and write this boot's record, a new file each boot (a later boot finds
// passwd copied up already, and appending to its last block needs no new one). It
// returns the first write's error.
func (b *vmBox) initRoot() error {
	b.boots++
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", b.lower, filepath.Join(b.disk, "upper"), filepath.Join(b.disk, "work"))
	if err := unix.Mount("overlay", b.root, "overlay", 0, opts); err != nil {
		return fmt.Errorf("mount overlay: %w", err)
	}
	b.rootMounted = true
	b.t.Cleanup(b.unmountRoot)
	now := time.Now()
	if err := os.Chtimes(filepath.Join(b.root, "etc", "passwd"), now, now); err != nil {
		return fmt.Errorf("touch /newroot/etc/passwd: %w", err)
	}
	rec := filepath.Join(b.root, "etc", fmt.Sprintf("boot.%d", b.boots))
	if err := os.WriteFile(rec, []byte(now.Format(time.RFC3339)+"\n"), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", rec, err)
	}
	return nil
}

func (b *vmBox) unmountRoot() {
	if b.rootMounted {
		if unix.Unmount(b.root, 0) != nil {
			unix.Unmount(b.root, unix.MNT_DETACH)
		}
		b.rootMounted = false
	}
}

// stop unmounts the root, then the disk, as a VM's stop does after the daemon is gone.
func (b *vmBox) stop() {
	b.t.Helper()
	b.unmountRoot()
	if err := b.unmountDisk(); err != nil {
		b.t.Fatalf("unmount the disk: %v", err)
	}
}

func (b *vmBox) serve() {
	b.t.Helper()
	b.daemon, b.sock, _ = serveDaemonIn(b.t, b.dir, b.fsBody, "", nil)
	b.cfgPath = filepath.Join(b.dir, "sandboxd.toml")
}

// command runs one of the agent's commands in the sandbox, as the runner does: `sandboxd
// launch` first, then the command if the launch said ok. It returns the launch's result.
func (b *vmBox) command(shell string) result {
	b.t.Helper()
	r := sandboxd(b.t, nil, "launch", "--socket", b.sock)
	if r.code == 0 {
		exec.Command("sh", "-c", shell).Run()
	}
	return r
}

func (b *vmBox) reserveHeld() int64 {
	var st unix.Stat_t
	if unix.Stat(filepath.Join(b.disk, ".sandboxd-reserve"), &st) != nil {
		return 0
	}
	return st.Blocks * 512
}

// fillAndStop is the failure: the agent fills the disk with `yes` between launches; the
// next launch is refused (exit 10, the reserve held so the sandbox can boot and be read);
// the command after it gets nothing.
func (b *vmBox) fill() {
	t := b.t
	if err := b.initRoot(); err != nil {
		t.Fatalf("first boot: %v", err)
	}
	b.serve()
	testenv.Eventually(t, time.Minute, "the reserve to be armed", func() bool { return b.reserveHeld() >= 8<<20 })
	if r := b.command(fmt.Sprintf(`exec yes AAAA > %s/home/agent/out`, b.root)); r.code != 0 {
		t.Fatalf("the first launch: exit %d: %s %s", r.code, r.stdout, r.stderr)
	}
	r := b.command(fmt.Sprintf(`exec yes BBBB > %s/home/agent/out2`, b.root))
	if r.code != 10 || !strings.Contains(r.stderr+r.stdout, "reserve file is held so the sandbox can boot and be read") ||
		!strings.Contains(r.stderr+r.stdout, vmSizeSetting) {
		t.Fatalf("launch on the full disk: exit %d, want 10 naming the held reserve and the size setting: %s %s", r.code, r.stdout, r.stderr)
	}
	// Had the launch answered ok, this is the command that ate the reserve.
	exec.Command("sh", "-c", fmt.Sprintf(`exec yes CCCC > %s/home/agent/out3`, b.root)).Run()
	// yes writes a page at a time: with 1 KiB blocks up to three may stay free. An agent
	// writing small pieces takes them too.
	exec.Command("sh", "-c", fmt.Sprintf(`yes DDDD | dd of=%s/home/agent/out4 bs=512 iflag=fullblock status=none`, b.root)).Run()
	exec.Command("sync", "-f", b.disk).Run()
	if b.reserveHeld() < 8<<20 {
		t.Fatal("the workload got the reserve")
	}
	if err := os.WriteFile(filepath.Join(b.root, "etc", "hostname"), []byte("sbx\n"), 0o644); err == nil {
		out, _ := exec.Command("sh", "-c", "df -B1 "+b.disk+"; ls -la "+b.disk+" "+b.root+"/etc "+b.root+"/home/agent").CombinedOutput()
		t.Fatalf("the disk is not full:\n%s", out)
	}
}

// readAndDelete is the user's "download": the work can be read, then deleted, and the
// conditions clear with the reserve re-armed.
func (b *vmBox) readAndDelete(cond string) {
	t := b.t
	got, err := os.ReadFile(filepath.Join(b.root, "home", "agent", "out"))
	if err != nil || !strings.HasPrefix(string(got), "AAAA\nAAAA\n") {
		t.Fatalf("read the work: %v", err)
	}
	if err := os.Remove(filepath.Join(b.root, "home", "agent", "out")); err != nil {
		t.Fatalf("delete the work: %v", err)
	}
	c := &client.Client{SocketPath: b.sock}
	testenv.Eventually(t, time.Minute, cond+" to clear and the reserve to re-arm", func() bool {
		st, err := c.Status(context.Background())
		if err != nil || b.reserveHeld() < 8<<20 {
			return false
		}
		for _, cd := range st.Conditions {
			if cd.Status && (cd.Type == cond || cd.Type == api.CondReplaceRecommended) {
				return false
			}
		}
		return true
	})
}

// saysCause checks that status, check and /v1/health name the condition with the cause
// and the size setting.
func (b *vmBox) saysCause(cond, cause string) {
	t := b.t
	c := &client.Client{SocketPath: b.sock}
	ctx := context.Background()
	var found api.Condition
	testenv.Eventually(t, time.Minute, cond+" in status", func() bool {
		st, err := c.Status(ctx)
		if err != nil {
			return false
		}
		for _, cd := range st.Conditions {
			if cd.Type == cond && cd.Status {
				found = cd
				return true
			}
		}
		return false
	})
	if !strings.Contains(found.Message, cause) || !strings.Contains(found.Message, vmSizeSetting) {
		t.Fatalf("%s in status does not name the cause %q and the setting: %s", cond, cause, found.Message)
	}
	h, err := c.Health(ctx)
	if err != nil || h.Status != api.HealthCritical || !strings.Contains(h.Summary, cond) {
		t.Fatalf("/v1/health: %+v, %v", h, err)
	}
	chk := sandboxd(t, nil, "check", "--socket", b.sock)
	if chk.code != 2 || !strings.Contains(chk.stdout, cond) || !strings.Contains(chk.stdout, vmSizeSetting) {
		t.Fatalf("check: exit %d: %s", chk.code, chk.stdout)
	}
}

// TestFullVMStopsBootsAndIsRead reproduces issue 22 with real parts and shows each way out.
func TestFullVMStopsBootsAndIsRead(t *testing.T) {
	testenv.RequireCommand(t, "mkfs.ext4")

	t.Run("graceful", func(t *testing.T) {
		b := newVMBox(t)
		b.fill()
		// SIGTERM, then unmount: the daemon releases the reserve on its way out.
		b.daemon.Process.Signal(syscall.SIGTERM)
		if err := b.daemon.Wait(); err != nil {
			t.Fatalf("daemon on SIGTERM: %v", err)
		}
		b.stop()
		b.mountDisk()
		if err := b.initRoot(); err != nil {
			t.Fatalf("init after a graceful stop at 100%%: %v", err)
		}
		b.serve()
		b.saysCause(api.CondReplaceRecommended, "of it is the released reserve")
		b.readAndDelete(api.CondReserveReleased)
	})

	t.Run("hard-boot-check", func(t *testing.T) {
		b := newVMBox(t)
		b.fill()
		b.daemon.Process.Kill() // nothing is released
		b.daemon.Wait()
		b.stop()
		b.mountDisk()
		if err := b.initRoot(); err == nil {
			t.Fatal("init after a hard stop at 100% succeeded without the boot check: the disk was not full")
		}
		b.unmountRoot()
		r := sandboxd(t, nil, "boot", "--config", filepath.Join(b.dir, "sandboxd.toml"))
		if r.code != 11 || !strings.Contains(r.stdout, "released the 8.0 MiB reserve") || !strings.Contains(r.stdout, vmSizeSetting) {
			t.Fatalf("boot check: exit %d: %s %s", r.code, r.stdout, r.stderr)
		}
		if err := b.initRoot(); err != nil {
			t.Fatalf("init after the boot check: %v", err)
		}
		b.serve()
		b.saysCause(api.CondBootedFull, "full: 0 B free of")
		b.readAndDelete(api.CondBootedFull)
	})

	t.Run("hard-image-recover", func(t *testing.T) {
		b := newVMBox(t)
		b.fill()
		b.daemon.Process.Kill()
		b.daemon.Wait()
		b.stop()
		b.mountDisk()
		if err := b.initRoot(); err == nil {
			t.Fatal("init after a hard stop at 100% succeeded without the recovery: the disk was not full")
		}
		b.stop()
		r := sandboxd(t, nil, "image", "check", b.img)
		if r.code != 0 || !strings.Contains(r.stdout, "sandboxd reserve /.sandboxd-reserve inside holds 8.0 MiB") {
			t.Fatalf("image check: exit %d: %s %s", r.code, r.stdout, r.stderr)
		}
		r = sandboxd(t, nil, "image", "recover", "--size-setting", vmSizeSetting, b.img)
		if r.code != 0 || !strings.Contains(r.stdout, "removed the sandboxd reserve /.sandboxd-reserve, freed 8.0 MiB") {
			t.Fatalf("image recover: exit %d: %s %s", r.code, r.stdout, r.stderr)
		}
		b.mountDisk()
		if err := b.initRoot(); err != nil {
			t.Fatalf("init after image recover: %v", err)
		}
		b.serve()
		b.saysCause(api.CondBootedFull, "`sandboxd image recover` on the host removed the 8.0 MiB reserve")
		b.readAndDelete(api.CondBootedFull)
		// The daemon removes the marker right after the re-armed file is in place, which
		// status (and so readAndDelete) can see a moment before.
		testenv.Eventually(t, time.Minute, "the marker of the host's release to go once the reserve is re-armed", func() bool {
			_, err := os.Lstat(filepath.Join(b.disk, ".sandboxd-reserve.released"))
			return os.IsNotExist(err)
		})
	})
}

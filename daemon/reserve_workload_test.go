package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// reserveBox is issue 22's box: a 64 MiB tmpfs, an 8 MiB reserve, replace_below 4 MiB,
// the default [launch] (1 MiB, 16 inodes).
func reserveBox(t *testing.T) (mnt, reserve, body string) {
	mnt = testenv.Tmpfs(t, 64<<20, 0)
	body = fmt.Sprintf(`site = []
[[filesystem]]
path = %q
reclaim_below = "12MiB"
replace_below = "4MiB"
reserve = "8MiB"
size_setting = "[openshell.drivers.vm] overlay_disk_mib"
`, mnt)
	return mnt, filepath.Join(mnt, ".sandboxd-reserve"), body
}

// yesInto runs `yes WORD > path` as a workload does, until the filesystem refuses it; it
// returns how much the file took.
func yesInto(t *testing.T, path, word string) int64 {
	t.Helper()
	out, err := exec.Command("sh", "-c", `exec yes "$1" > "$2"`, "sh", word, path).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "No space left") {
		t.Fatalf("yes %s > %s: want ENOSPC, got %v: %s", word, path, err, out)
	}
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

func refusalOf(t *testing.T, err error) api.Problem {
	t.Helper()
	var pe *client.ProblemError
	if !errors.As(err, &pe) {
		t.Fatalf("want a refusal (problem+json), got %v", err)
	}
	return pe.Problem
}

// TestReserveIsNeverTheWorkloads reproduces issue 22's sequence: `yes` fills the box; the
// runner's next launch is refused replace_sandbox (it released the reserve and answered ok,
// exit 0) and says the reserve is held and how to release it; the next command gets
// nothing (it ate the 8 MiB); a resume says replace; and the graceful stop releases the
// reserve, so the next boot has 8 MiB to build its overlay root.
func TestReserveIsNeverTheWorkloads(t *testing.T) {
	mnt, reserve, body := reserveBox(t)
	td := startDaemon(t, body)
	ctx := context.Background()
	poll(t, 10e9, "the 8 MiB reserve to be armed", func() bool { return allocatedBytes(reserve) >= 8<<20 })

	yesInto(t, filepath.Join(mnt, "fill"), "AAAA")
	_, err := td.client.Launch(ctx, api.LaunchRequest{})
	p := refusalOf(t, err)
	if p.Code != api.CodeReplaceSandbox || !strings.Contains(p.Detail, "8.0 MiB reserve file is held so the sandbox can boot and be read") ||
		!strings.Contains(p.Detail, "sandboxd reserve release") || !strings.Contains(p.Detail, "overlay_disk_mib") {
		t.Fatalf("launch on a full box: want replace_sandbox naming the held reserve, how to release it and the size setting; got %s: %s", p.Code, p.Detail)
	}
	if got := allocatedBytes(reserve); got < 8<<20 {
		t.Fatalf("the launch gave the reserve to the workload: the file holds %d", got)
	}
	if n := yesInto(t, filepath.Join(mnt, "fill2"), "BBBB"); n > 1<<20 {
		t.Fatalf("the next command wrote %d bytes: the reserve went to the workload", n)
	}
	run, err := td.client.Resume(ctx, api.ResumeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if run.Verdict != api.VerdictReplace || allocatedBytes(reserve) < 8<<20 {
		t.Fatalf("resume on a full box: verdict %s, reserve holds %d; want replace and the reserve held: %s", run.Verdict, allocatedBytes(reserve), run.Detail)
	}
	for _, a := range run.Actions {
		if a.Kind == api.ActionReleaseReserve {
			t.Fatalf("resume released the reserve: %+v", a)
		}
	}

	td.stop() // SIGTERM's path: shutdown below replace_below releases the reserve
	if _, err := os.Lstat(reserve); !os.IsNotExist(err) {
		t.Fatalf("stopped full, the reserve is still there (%v): the box cannot boot", err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "passwd"), []byte("root:x:0:0::/root:/bin/sh\n"), 0o644); err != nil {
		t.Fatalf("after the stop, init's write fails: %v", err)
	}
}

// TestReleasedReserveIsNotHealth: a reserve released on a writer's explicit request is not
// health: with the rest below replace_below, resume says replace and a launch is refused,
// naming the released reserve. The file comes back only once free space is at or above the
// reclaim threshold plus the (capped) headroom plus the reserve, and the target a resume
// names is within the filesystem's size and says the headroom was capped.
func TestReleasedReserveIsNotHealth(t *testing.T) {
	mnt, reserve, body := reserveBox(t)
	td := startDaemon(t, body)
	ctx := context.Background()
	poll(t, 10e9, "the 8 MiB reserve to be armed", func() bool { return allocatedBytes(reserve) >= 8<<20 })
	yesInto(t, filepath.Join(mnt, "fill"), "AAAA")

	run, err := td.client.Reclaim(ctx, api.ReclaimRequest{ReleaseReserve: true, Reason: "download the agent's work"})
	if err != nil {
		t.Fatal(err)
	}
	if allocatedBytes(reserve) != 0 || run.Verdict != api.VerdictReplace {
		t.Fatalf("release_reserve: file holds %d, verdict %s: %s", allocatedBytes(reserve), run.Verdict, run.Detail)
	}
	st, err := td.client.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c := condition(st, api.CondReserveReleased, mnt); !c.Status || !strings.Contains(c.Message, "download the agent's work") {
		t.Fatalf("ReserveReleased after an explicit release: %+v", c)
	}
	run, err = td.client.Resume(ctx, api.ResumeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if run.Verdict != api.VerdictReplace || !strings.Contains(run.Detail, "released reserve") {
		t.Fatalf("resume with only the released reserve free: want replace naming it, got %s: %s", run.Verdict, run.Detail)
	}
	_, err = td.client.Launch(ctx, api.LaunchRequest{})
	if p := refusalOf(t, err); p.Code != api.CodeReplaceSandbox || !strings.Contains(p.Detail, "reserve was released") {
		t.Fatalf("launch with only the released reserve free: got %s: %s", p.Code, p.Detail)
	}

	// Remove the work; free space is back well above the threshold: the reserve re-arms,
	// leaving at least the threshold plus the capped headroom (12 + 16 MiB).
	if err := os.Remove(filepath.Join(mnt, "fill")); err != nil {
		t.Fatal(err)
	}
	poll(t, 10e9, "the reserve to re-arm and status to show it", func() bool {
		st, err = td.client.Status(ctx)
		return err == nil && allocatedBytes(reserve) >= 8<<20 && st.Filesystems[0].ReserveBytes >= 8<<20
	})
	if fs := st.Filesystems[0]; fs.ReserveReleasedBytes != 0 || fs.AvailBytes < 12<<20+16<<20 {
		t.Fatalf("after re-arming: released %d, avail %d; want 0 and at least threshold plus headroom", fs.ReserveReleasedBytes, fs.AvailBytes)
	}

	// Below the threshold but above replace: the target named is within the 64 MiB and
	// says the headroom was capped and that it counts the reserve.
	if err := testenv.Fill(filepath.Join(mnt, "fill3"), 46<<20); err != nil {
		t.Fatal(err)
	}
	run, err = td.client.Reclaim(ctx, api.ReclaimRequest{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	// "268" (of 268,435,456: the uncapped headroom) is looked for without the mount's
	// path, whose random temp name can hold those digits too (sandboxd-tmpfs-2684360567).
	if !strings.Contains(run.Detail, "capped at 16.0 MiB, a quarter of the filesystem's 64.0 MiB") || strings.Contains(strings.ReplaceAll(run.Detail, mnt, ""), "268") {
		t.Fatalf("dry run below the threshold: the target is not capped or not said so: %s", run.Detail)
	}
}

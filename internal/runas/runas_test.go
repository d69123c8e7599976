package runas

import (
	"os"
	"os/exec"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

func TestCredentialOfTheDaemonItselfIsNil(t *testing.T) {
	if c := Credential(uint32(os.Geteuid()), uint32(os.Getegid())); c != nil {
		t.Fatalf("credential for the daemon's own ids = %+v, want nil", c)
	}
}

// A child run for another user has exactly that user's groups: not root's group 0 (the
// daemon's), and every group the user database gives the user.
func TestChildGetsTheOwnersGroupsNotTheDaemons(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommand(t, "id")
	u, err := user.Lookup("nobody")
	if err != nil {
		testenv.Unavailable(t, "no user nobody on this machine: %v", err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	// The daemon's own supplementary groups, as a root service may have them.
	old, err := syscall.Getgroups()
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Setgroups([]int{0, 4242}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Setgroups(old) })
	want := Groups(uint32(uid))
	if len(want) == 0 {
		t.Fatalf("no groups found for %s (%s)", u.Username, u.Uid)
	}
	cmd := exec.Command("id", "-G")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: Credential(uint32(uid), uint32(gid))}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("id -G as %s: %v: %s", u.Username, err, out)
	}
	var got []uint32
	for _, f := range strings.Fields(string(out)) {
		g, err := strconv.ParseUint(f, 10, 32)
		if err != nil {
			t.Fatalf("id -G printed %q", out)
		}
		if !slices.Contains(got, uint32(g)) {
			got = append(got, uint32(g))
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	want = slices.Compact(want)
	if !slices.Equal(got, want) {
		t.Fatalf("child of user %s has groups %v, want %v (the user's own)", u.Username, got, want)
	}
	for _, g := range []uint32{0, 4242} {
		if slices.Contains(got, g) && !slices.Contains(want, g) {
			t.Fatalf("child kept the daemon's group %d", g)
		}
	}
}

func TestUnknownUidGetsNoSupplementaryGroups(t *testing.T) {
	if g := Groups(4_000_000_123); g == nil || len(g) != 0 {
		t.Fatalf("Groups(unknown) = %#v, want an empty, non-nil list", g)
	}
}

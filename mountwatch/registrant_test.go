package mountwatch

import (
	"testing"

	"golang.org/x/sys/unix"
)

// permits picks one class of mode bits as the kernel does: the owner's for the owner even
// when the group's or others' would allow more, the group's for a member of the file's
// group through a supplementary group, the others' for everyone else.
func TestRegistrantPermitsAsTheKernel(t *testing.T) {
	r := &Registrant{UID: 1000, GID: 1000, Groups: []uint32{4242}}
	cases := []struct {
		uid, gid uint32
		mode     uint32
		want     bool
	}{
		{1000, 0, 0o700, true},
		{1000, 0, 0o077, false}, // the owner's bits decide for the owner
		{0, 4242, 0o070, true},  // a supplementary group
		{0, 1000, 0o030, true},  // the primary group
		{0, 4242, 0o707, false}, // the group's bits decide for a member
		{0, 0, 0o753, true},
		{0, 0, 0o755, false},
		{0, 0, 0o1777, true},
	}
	for _, c := range cases {
		st := unix.Stat_t{Uid: c.uid, Gid: c.gid, Mode: unix.S_IFDIR | c.mode}
		if got := r.permits(&st, 3); got != c.want {
			t.Errorf("uid %d gid %d mode %04o: write+search = %v, want %v", c.uid, c.gid, c.mode, got, c.want)
		}
	}
	if !(*Registrant)(nil).isRoot() || !(&Registrant{UID: 0}).isRoot() || r.isRoot() {
		t.Error("isRoot: nil and uid 0 are root, uid 1000 is not")
	}
	if (*Registrant)(nil).cred() != nil || r.cred() == nil || r.cred().Groups == nil {
		t.Error("cred: nil for root; for uid 1000 its own, with a non-nil group list")
	}
}

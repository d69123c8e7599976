package config

import (
	"os/user"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

func TestWriters(t *testing.T) {
	root, err := user.Lookup("root")
	if err != nil {
		testenv.Unavailable(t, "no root user in the user database")
	}
	if root.Uid != "0" {
		testenv.Unavailable(t, "root is not uid 0 here")
	}
	g, err := user.LookupGroup("root")
	if err != nil || g.Gid != "0" {
		testenv.Unavailable(t, "no root group with gid 0")
	}
	c := mustParse(t, "[server]\nwriters = [\"uid:1000\", \"gid:100\", \"user:root\", \"group:root\"]\n")
	uids, gids, err := c.Writers()
	if err != nil || !slices.Equal(uids, []uint32{1000, 0}) || !slices.Equal(gids, []uint32{100, 0}) {
		t.Errorf("Writers = %v, %v, %v", uids, gids, err)
	}

	c.Server.Writers = []string{"uid:1", "user:no-such-user-sbx", "uid:4294967295", "nobody"}
	uids, _, err = c.Writers()
	if !slices.Equal(uids, []uint32{1}) || err == nil {
		t.Fatalf("Writers = %v, %v", uids, err)
	}
	for _, want := range []string{"server.writers[1]", "no-such-user-sbx", "server.writers[2]", "server.writers[3]"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}

func TestOwnerAndSocketGroup(t *testing.T) {
	for owner, want := range map[string]uint32{"uid:1000": 1000, "user:root": 0} {
		uid, set, err := Site{Owner: owner}.OwnerUID()
		if err != nil || !set || uid != want {
			t.Errorf("OwnerUID(%q) = %d, %v, %v", owner, uid, set, err)
		}
	}
	if _, set, err := (Site{}).OwnerUID(); set || err != nil {
		t.Errorf("empty owner: %v %v", set, err)
	}
	for group, want := range map[string]uint32{"0": 0, "root": 0, "4242": 4242} {
		gid, set, err := Server{SocketGroup: group}.SocketGID()
		if err != nil || !set || gid != want {
			t.Errorf("SocketGID(%q) = %d, %v, %v", group, gid, set, err)
		}
	}
	if _, set, err := (Server{}).SocketGID(); set || err != nil {
		t.Errorf("empty socket group: %v %v", set, err)
	}
}

package config

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/units"
)

func roundTrip(t *testing.T, c *Config) *Config {
	t.Helper()
	out, err := Marshal(c)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	back, err := Parse(out, "marshalled")
	if err != nil {
		t.Fatalf("parse of marshalled config: %v\n%s", err, out)
	}
	if !reflect.DeepEqual(back, c) {
		t.Fatalf("round trip changed the config:\n got %+v\nwant %+v\ntext:\n%s", back, c, out)
	}
	return back
}

func TestRoundTrip(t *testing.T) {
	for _, name := range []string{"", "testdata/full.toml", "testdata/inline.toml", "testdata/empty-lists.toml"} {
		t.Run(name, func(t *testing.T) {
			src := Default()
			if name != "" {
				src = readFile(t, name)
			}
			roundTrip(t, mustParse(t, src))
		})
	}
	// Values that stress the encodings: odd sizes, fractional percents, escapes.
	c := mustParse(t, "")
	c.Launch.NeedBytes = 1234567
	c.Reclaim.Headroom = 3 << 29
	c.Filesystems[0].ReclaimBelow = units.Threshold{Pct: 12.345678901234567, Percent: true}
	c.Filesystems[0].ReplaceBelow = units.Threshold{Pct: 0.1, Percent: true}
	c.Filesystems[0].ReplaceBelowInodes = units.Threshold{Amount: 7}
	c.Filesystems[0].WarnTimeToFull = 90*time.Minute + time.Nanosecond
	c.Sites[0].Owner = "uid:1000"
	c.Sites[0].MaxBytes = api.Size(1<<40 + 1)
	c.Reclaim.Caches = []Cache{{Name: "c", Path: "/srv/c", Command: []string{"sh", "-c", "echo \"a\\b\"\n\x01 é ✓"}, Order: -3, Ladder: LadderGC}}
	c.Mounts = []Mount{{Name: "m", Path: "/mnt/m", ProbeInterval: 100 * time.Millisecond, ProbeTimeout: time.Hour,
		RemountTimeout: 90 * time.Second, RefreshAt: 1e-7, Links: []Link{{Path: "/srv/x", Target: "/mnt/m/y"}}}}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	roundTrip(t, c)
}

func TestMarshalReadable(t *testing.T) {
	out, err := Marshal(mustParse(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`reclaim_below = "1.5GiB"`, `need_bytes = "1MiB"`, `max_age = "12h"`,
		`transition_period = "1m"`, `socket_mode = "0660"`, `reclaim_below_inodes = "5%"`, `need_inodes = 16`,
		"mount = []", "cache = []"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("marshalled default lacks %s:\n%s", want, out)
		}
	}
}

func TestMarshalRejectsUnencodable(t *testing.T) {
	c := mustParse(t, "")
	c.Sites[0].Owner = "\xff"
	if _, err := Marshal(c); err == nil {
		t.Error("invalid UTF-8 marshalled")
	}
}

// full.toml sets every key away from its default, so its round trip proves that
// Marshal writes, and Parse reads, every key.
func TestFullSetsEveryKey(t *testing.T) {
	full, def := mustParse(t, readFile(t, "testdata/full.toml")), mustParse(t, "")
	for _, sec := range []struct {
		name      string
		got, want any
	}{
		{"server", full.Server, def.Server}, {"log", full.Log, def.Log}, {"metrics", full.Metrics, def.Metrics}, {"health", full.Health, def.Health},
		{"launch", full.Launch, def.Launch}, {"reclaim", full.Reclaim, def.Reclaim},
		{"mounts", full.RuntimeMounts, def.RuntimeMounts},
	} {
		sameFields(t, sec.name, []any{sec.got}, sec.want)
	}
	sameFields(t, "filesystem", anys(full.Filesystems), DefaultFilesystem())
	sameFields(t, "site", anys(full.Sites), DefaultSite())
	sameFields(t, "reclaim.cache", anys(full.Reclaim.Caches), DefaultCache())
	sameFields(t, "mount", anys(full.Mounts), DefaultMount())
}

func anys[T any](list []T) []any {
	out := make([]any, len(list))
	for i, v := range list {
		out[i] = v
	}
	return out
}

// sameFields fails for each field that no entry sets away from def.
func sameFields(t *testing.T, name string, entries []any, def any) {
	t.Helper()
	dv := reflect.ValueOf(def)
	for i := 0; i < dv.NumField(); i++ {
		differs := false
		for _, e := range entries {
			differs = differs || !reflect.DeepEqual(reflect.ValueOf(e).Field(i).Interface(), dv.Field(i).Interface())
		}
		if !differs {
			t.Errorf("testdata/full.toml leaves %s.%s at its default", name, dv.Type().Field(i).Tag.Get("toml"))
		}
	}
}

func ExampleMarshal() {
	c, _ := Parse([]byte("site = []\n[log]\nlevel = \"debug\"\n"), "example.toml")
	out, _ := Marshal(c)
	fmt.Println(strings.Split(string(out), "\n[health]")[0])
	// Output:
	// version = 1
	// site = []
	// mount = []
	//
	// [server]
	// socket = "/run/sandboxd/sandboxd.sock"
	// socket_mode = "0660"
	// socket_group = ""
	// writers = []
	// http = ""
	// state_dir = "/var/lib/sandboxd"
	// mode = "enforce"
	//
	// [log]
	// level = "debug"
	// format = "text"
	//
	// [metrics]
	// textfile = ""
	// textfile_interval = "15s"
}

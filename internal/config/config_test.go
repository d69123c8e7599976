package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/units"
)

func TestDefaultLoadsAndValidates(t *testing.T) {
	// `sandboxd config check` of what `sandboxd config default` prints must pass.
	c := mustParse(t, Default())
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	empty := mustParse(t, "")
	if !reflect.DeepEqual(c, empty) {
		t.Errorf("an empty file is not the default:\n%+v\n%+v", empty, c)
	}
	loaded, err := Load("")
	if err != nil || !reflect.DeepEqual(loaded, c) {
		t.Errorf("Load(\"\") = %+v, %v; want the default", loaded, err)
	}
	// The policy of CONTRACT §10.
	want := &Config{
		Version: 1,
		Server: Server{Socket: api.DefaultSocketPath, SocketMode: 0o660, StateDir: "/var/lib/sandboxd",
			Mode: api.ModeEnforce},
		Log:     Log{Level: "info", Format: "text"},
		Metrics: Metrics{TextfileInterval: 15 * time.Second},
		Health:  Health{TransitionPeriod: time.Minute, SampleInterval: time.Second},
		Launch:  Launch{Deadline: 2 * time.Second, NeedBytes: 1 << 20, NeedInodes: 16},
		Filesystems: []Filesystem{func() Filesystem {
			f := DefaultFilesystem()
			f.Path = "/"
			return f
		}()},
		Sites: []Site{func() Site {
			s := DefaultSite()
			s.Name, s.Path = "aura-bg", "/tmp/aura-bg"
			return s
		}()},
		Reclaim: Reclaim{
			AutoCaches: CacheKinds(), Protect: []string{"/home", "/root"}, MinAge: 2 * time.Minute,
			Headroom: 256 << 20, HeadroomInodes: units.Threshold{Pct: 1, Percent: true},
			Cooldown: 10 * time.Minute, MaxRunsPerHour: 6, LeadTime: 10 * time.Minute,
		},
		RuntimeMounts: RuntimeMounts{MaxRegistered: 256, MaxPerUID: 64},
		Jobs: Jobs{DefaultTTL: 3 * time.Minute, MaxLifetime: 12 * time.Hour, Grace: 10 * time.Second,
			UnleasedMax: time.Hour, KeepEnded: time.Hour, RegistryDir: "/run/sandboxd", KeepEndedMax: 1024, MaxPerUID: 1024},
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("default config:\n got %+v\nwant %+v", c, want)
	}
	// replace_below is 256MiB since issue 28 (docs/policy.md: the fleet simulator's table).
	if f := c.Filesystems[0]; f.ReclaimBelow.Amount != 1536<<20 || f.ReplaceBelow.Amount != 256<<20 ||
		f.ReclaimBelowInodes.Pct != 5 || f.ReplaceBelowInodes.Pct != 1 || f.Reserve != 256<<20 ||
		f.WarnTimeToFull != time.Hour {
		t.Errorf("default filesystem = %+v", f)
	}
	if c.Observe() {
		t.Error("default mode is observe, want enforce")
	}
}

func TestLoadFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "sandboxd.toml")
	if err := os.WriteFile(p, []byte("[log]\nlevel = \"debug\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(p)
	if err != nil || c.Log.Level != "debug" {
		t.Fatalf("Load = %+v, %v", c, err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.toml")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load of a missing file = %v, want fs.ErrNotExist", err)
	}
	// Problems name the file.
	if err := os.WriteFile(p, []byte("[log]\nlevel = \"loud\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Load(p)
	var ve *ValidationError
	if !errors.As(err, &ve) || ve.Problems[0].File != p || ve.Error() != p+`:2: log.level: "loud": want one of debug | info | warn | error` {
		t.Errorf("Load of a bad file = %v", err)
	}
}

func TestMergePerKey(t *testing.T) {
	// Setting one threshold must not zero the others (kubernetes #112057).
	c := mustParse(t, "[[filesystem]]\npath = \"/\"\nreclaim_below = \"3GiB\"\n")
	want := DefaultFilesystem()
	want.Path, want.ReclaimBelow = "/", units.Threshold{Amount: 3 << 30}
	if !reflect.DeepEqual(c.Filesystems, []Filesystem{want}) {
		t.Errorf("filesystems = %+v, want %+v", c.Filesystems, want)
	}
	// One key of a table keeps the table's other keys.
	c = mustParse(t, "[reclaim]\ncooldown = \"1h\"\n[server]\nmode = \"observe\"\n")
	def := mustParse(t, "")
	if c.Reclaim.Cooldown != time.Hour || c.Reclaim.MaxRunsPerHour != 6 || !reflect.DeepEqual(c.Reclaim.Protect, def.Reclaim.Protect) {
		t.Errorf("reclaim = %+v", c.Reclaim)
	}
	if !c.Observe() || c.Server.Socket != def.Server.Socket || c.Server.SocketMode != 0o660 {
		t.Errorf("server = %+v", c.Server)
	}
	// Tables the file does not mention, and their lists, are the default's.
	if !reflect.DeepEqual(c.Sites, def.Sites) || !reflect.DeepEqual(c.Filesystems, def.Filesystems) {
		t.Errorf("untouched lists changed: %+v %+v", c.Sites, c.Filesystems)
	}
}

func TestArraysReplace(t *testing.T) {
	c := mustParse(t, "[[site]]\nname = \"x\"\npath = \"/var/tmp/x\"\nmax_files = 7\n[[site]]\nname = \"y\"\npath = \"/var/tmp/y\"\n")
	x, y := DefaultSite(), DefaultSite()
	x.Name, x.Path, x.MaxFiles = "x", "/var/tmp/x", 7
	y.Name, y.Path = "y", "/var/tmp/y"
	if !reflect.DeepEqual(c.Sites, []Site{x, y}) {
		t.Errorf("sites = %+v, want the file's two with per-entry defaults", c.Sites)
	}
	c = mustParse(t, "site = []\n")
	if len(c.Sites) != 0 || len(c.Filesystems) != 1 {
		t.Errorf("site = [] gave sites %+v, filesystems %+v", c.Sites, c.Filesystems)
	}
	c = mustParse(t, "filesystem = []\n[reclaim]\nauto_caches = []\n")
	if len(c.Filesystems) != 0 || len(c.Reclaim.AutoCaches) != 0 || len(c.Sites) != 1 {
		t.Errorf("empty lists: %+v", c)
	}
	// Inline arrays of tables are arrays of tables too.
	c = mustParse(t, "mount = [{name = \"m\", path = \"/mnt/m\"}]\n")
	m := DefaultMount()
	m.Name, m.Path = "m", "/mnt/m"
	if !reflect.DeepEqual(c.Mounts, []Mount{m}) {
		t.Errorf("mounts = %+v", c.Mounts)
	}
}

func TestIdentityKeysRequired(t *testing.T) {
	src := "[[site]]\nname = \"a\"\npath = \"/tmp/a\"\n[[site]]\nmax_age = \"1h\"\n"
	wantProblem(t, src, "site[1].name", "[[site]]\nmax_age", "required")
	wantProblem(t, src, "site[1].path", "[[site]]\nmax_age", "required")
	wantProblem(t, "[[filesystem]]\nreserve = \"0\"\n", "filesystem[0].path", "[[filesystem]]", "required")
	wantProblem(t, "[[reclaim.cache]]\nname = \"c\"\n", "reclaim.cache[0].path", "[[reclaim.cache]]", "required")
	wantProblem(t, "[[mount]]\npath = \"/mnt/m\"\n", "mount[0].name", "[[mount]]", "required")
	wantProblem(t, "[[mount]]\nname = \"m\"\npath = \"/mnt/m\"\nlinks = [{path = \"/srv/l\"}]\n",
		"mount[0].links[0].target", "links", "required")
}

func TestLoadTestdata(t *testing.T) {
	c := mustParse(t, readFile(t, "testdata/full.toml"))
	if c.Filesystems[1].Path != "/srv" || c.Sites[1].Name != "agent.bg" || c.Mounts[0].Links[1].Target != "/mnt/agent/out" ||
		c.Filesystems[0].ReplaceBelow != (units.Threshold{Pct: 2.5, Percent: true}) || c.Server.SocketMode != 0o600 {
		t.Errorf("full.toml decoded to %+v", c)
	}
	c = mustParse(t, readFile(t, "testdata/inline.toml"))
	if c.Server.Socket != "/run/s.sock" || !c.Observe() || c.Log.Level != "warn" || len(c.Sites) != 2 ||
		c.Sites[1].MaxFiles != 5 || c.Sites[1].MaxAge != 12*time.Hour || c.Mounts[0].Links[0].Path != "/srv/l" {
		t.Errorf("inline.toml decoded to %+v", c)
	}
	c = mustParse(t, readFile(t, "testdata/empty-lists.toml"))
	if len(c.Sites)+len(c.Filesystems)+len(c.Reclaim.AutoCaches)+len(c.Reclaim.Protect) != 0 {
		t.Errorf("empty-lists.toml decoded to %+v", c)
	}
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

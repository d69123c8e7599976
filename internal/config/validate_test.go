package config

import (
	"strings"
	"testing"
)

// Each case is a file with one bad value; the problem must name the key, sit on the
// line of marker and quote the bad value.
func TestRejections(t *testing.T) {
	cases := []struct {
		name, src, key, marker string
		contains               []string
	}{
		{"version", "version = 2\n", "version", "version", []string{"2"}},
		{"version type", "version = \"1\"\n", "version", "version", []string{"integer"}},
		{"negative size string", "[launch]\nneed_bytes = \"-1MiB\"\n", "launch.need_bytes", "need_bytes", []string{"negative", "-1MiB"}},
		{"negative size integer", "[reclaim]\nheadroom = -5\n", "reclaim.headroom", "headroom", []string{"negative", "-5"}},
		{"bad size", "[[site]]\nname = \"s\"\npath = \"/tmp/s\"\nmax_bytes = \"lots\"\n", "site[0].max_bytes", "max_bytes", []string{`"lots"`}},
		{"negative drain rate", "[[site]]\nname = \"s\"\npath = \"/tmp/s\"\ndrain_rate = -1\n", "site[0].drain_rate", "drain_rate", []string{"negative", "-1"}},
		{"negative duration", "[[site]]\nname = \"s\"\npath = \"/tmp/s\"\nmax_age = \"-1h\"\n", "site[0].max_age", "max_age", []string{"negative", "-1h"}},
		{"bad duration", "[health]\ntransition_period = \"soon\"\n", "health.transition_period", "transition_period", []string{`"soon"`}},
		{"duration as number", "[launch]\ndeadline = 2\n", "launch.deadline", "deadline", []string{"duration", "2"}},
		{"replace above reclaim, sizes", "[[filesystem]]\npath = \"/\"\nreclaim_below = \"1GiB\"\nreplace_below = \"2GiB\"\n",
			"filesystem[0].replace_below", "replace_below", []string{"2.0 GiB", "reclaim_below", "1.0 GiB"}},
		{"replace above default reclaim", "[[filesystem]]\npath = \"/\"\nreplace_below = \"2GiB\"\n",
			"filesystem[0].replace_below", "replace_below", []string{"2.0 GiB", "1.5 GiB"}},
		{"replace above reclaim, percents", "[[filesystem]]\npath = \"/\"\nreclaim_below = \"5%\"\nreplace_below = \"10%\"\n",
			"filesystem[0].replace_below", "replace_below", []string{"10%", "5%"}},
		{"replace above reclaim, inode counts", "[[filesystem]]\npath = \"/\"\nreclaim_below_inodes = 100\nreplace_below_inodes = 200\n",
			"filesystem[0].replace_below_inodes", "replace_below_inodes", []string{"200", "100"}},
		{"replace above reclaim, inode percents", "[[filesystem]]\npath = \"/\"\nreplace_below_inodes = \"6%\"\n",
			"filesystem[0].replace_below_inodes", "replace_below_inodes", []string{"6%", "5%"}},
		{"percent over 100", "[[filesystem]]\npath = \"/\"\nreclaim_below = \"150%\"\n", "filesystem[0].reclaim_below", "reclaim_below", []string{"150%"}},
		{"count threshold not a count", "[reclaim]\nheadroom_inodes = \"1GiB\"\n", "reclaim.headroom_inodes", "headroom_inodes", []string{"1GiB"}},
		{"cache root equals protect", "[reclaim]\nprotect = [\"/srv/cache\"]\n[[reclaim.cache]]\nname = \"c\"\npath = \"/srv/cache\"\n",
			"reclaim.cache[0].path", "path = \"/srv/cache\"", []string{"/srv/cache", "reclaim.protect[0]"}},
		{"cache root contains protect", "[reclaim]\nprotect = [\"/home\", \"/srv/cache/keep\"]\n[[reclaim.cache]]\nname = \"c\"\npath = \"/srv\"\n",
			"reclaim.cache[0].path", "path = \"/srv\"", []string{`"/srv"`, "/srv/cache/keep", "reclaim.protect[1]"}},
		{"cache root is /", "[[reclaim.cache]]\nname = \"c\"\npath = \"/\"\n", "reclaim.cache[0].path", "path = \"/\"", []string{"root directory"}},
		{"cache root is /usr", "[[reclaim.cache]]\nname = \"c\"\npath = \"/usr/\"\n", "reclaim.cache[0].path", "path", []string{`"/usr"`, "system directory"}},
		{"cache root is /lib64", "[[reclaim.cache]]\nname = \"c\"\npath = \"/lib64\"\n", "reclaim.cache[0].path", "path", []string{"/lib64", "system directory"}},
		{"cache root is /var/lib", "[[reclaim.cache]]\nname = \"c\"\npath = \"/var/lib\"\n", "reclaim.cache[0].path", "path", []string{"/var/lib", "system directory"}},
		{"cache root is the state dir", "[[reclaim.cache]]\nname = \"c\"\npath = \"/var/lib/sandboxd\"\n", "reclaim.cache[0].path", "path", []string{"is the state directory", "server.state_dir"}},
		{"cache root contains the state dir", "[server]\nstate_dir = \"/srv/st/sandboxd\"\n[[reclaim.cache]]\nname = \"c\"\npath = \"/srv/st\"\n", "reclaim.cache[0].path", "path = \"/srv/st\"", []string{"contains the state directory", "/srv/st/sandboxd"}},
		{"cache root inside a site", "[[site]]\nname = \"s\"\npath = \"/srv/bg\"\n[[reclaim.cache]]\nname = \"c\"\npath = \"/srv/bg/cache\"\n", "reclaim.cache[0].path", "path = \"/srv/bg/cache\"", []string{"overlaps the site root", "site[0].path"}},
		{"cache root contains a site", "[[site]]\nname = \"s\"\npath = \"/srv/c/bg\"\n[[reclaim.cache]]\nname = \"c\"\npath = \"/srv/c\"\n", "reclaim.cache[0].path", "path = \"/srv/c\"", []string{"overlaps the site root \"/srv/c/bg\""}},
		{"site root is /", "[[site]]\nname = \"s\"\npath = \"/\"\n", "site[0].path", "path", []string{"root directory"}},
		{"site root is /etc", "[[site]]\nname = \"s\"\npath = \"/etc\"\n", "site[0].path", "path", []string{"/etc", "system directory"}},
		{"site root is /var", "[[site]]\nname = \"s\"\npath = \"/var\"\n", "site[0].path", "path", []string{"/var", "system directory"}},
		{"site root is /run", "[[site]]\nname = \"s\"\npath = \"/run\"\n", "site[0].path", "path", []string{"/run", "system directory"}},
		{"site root contains the state dir", "[[site]]\nname = \"s\"\npath = \"/var/lib/sandboxd/..\"\n", "site[0].path", "path", []string{"system directory"}},
		{"site root is the state dir", "[server]\nstate_dir = \"/srv/sbx\"\n[[site]]\nname = \"s\"\npath = \"/srv/sbx\"\n", "site[0].path", "path = \"/srv/sbx\"", []string{"is the state directory"}},
		{"site inside protect", "[[site]]\nname = \"s\"\npath = \"/home/u/tmp\"\n", "site[0].path", "path", []string{"/home/u/tmp", `"/home"`}},
		{"site equals protect", "[[site]]\nname = \"s\"\npath = \"/root/\"\n", "site[0].path", "path", []string{`"/root"`}},
		{"default site inside a protect of the file", "[reclaim]\nprotect = [\"/tmp\"]\n", "site[0].path", "", []string{"/tmp/aura-bg", "embedded default"}},
		{"relative socket", "[server]\nsocket = \"run/s.sock\"\n", "server.socket", "socket", []string{"run/s.sock", "relative"}},
		{"relative textfile", "[metrics]\ntextfile = \"sandboxd.prom\"\n", "metrics.textfile", "textfile", []string{"sandboxd.prom", "relative"}},
		{"textfile not .prom", "[metrics]\ntextfile = \"/var/lib/prometheus/node-exporter/sandboxd.txt\"\n", "metrics.textfile", "textfile", []string{"sandboxd.txt", "*.prom"}},
		{"zero textfile interval", "[metrics]\ntextfile_interval = \"0s\"\n", "metrics.textfile_interval", "textfile_interval", []string{"0s", "above zero"}},
		{"relative state dir", "[server]\nstate_dir = \"state\"\n", "server.state_dir", "state_dir", []string{`"state"`}},
		{"relative filesystem", "[[filesystem]]\npath = \"data\"\n", "filesystem[0].path", "path", []string{`"data"`}},
		{"relative reserve path", "[[filesystem]]\npath = \"/\"\nreserve_path = \"r\"\n", "filesystem[0].reserve_path", "reserve_path", []string{`"r"`}},
		{"relative site", "[[site]]\nname = \"s\"\npath = \"tmp/s\"\n", "site[0].path", "path", []string{"tmp/s"}},
		{"relative protect", "[reclaim]\nprotect = [\"/home\", \"root\"]\n", "reclaim.protect[1]", "protect", []string{`"root"`}},
		{"relative cache", "[[reclaim.cache]]\nname = \"c\"\npath = \"cache\"\n", "reclaim.cache[0].path", "path", []string{`"cache"`}},
		{"relative mount", "[[mount]]\nname = \"m\"\npath = \"mnt\"\n", "mount[0].path", "path", []string{`"mnt"`}},
		{"relative credential file", "[[mount]]\nname = \"m\"\npath = \"/mnt/m\"\ncredential_file = \"c.json\"\n", "mount[0].credential_file", "credential_file", []string{"c.json"}},
		{"relative link target", "[[mount]]\nname = \"m\"\npath = \"/mnt/m\"\nlinks = [\n  {path = \"/srv/a\", target = \"/mnt/m\"},\n  {path = \"/srv/b\", target = \"m\"},\n]\n",
			"mount[0].links[1].target", "{path = \"/srv/b\"", []string{`"m"`}},
		{"empty path", "[[site]]\nname = \"s\"\npath = \"\"\n", "site[0].path", "path", []string{"empty"}},
		{"link inside its mount", "[[mount]]\nname = \"m\"\npath = \"/mnt/m\"\nlinks = [{path = \"/mnt/m/x\", target = \"/mnt/m\"}]\n", "mount[0].links[0].path", "links", []string{"/mnt/m/x", "outside"}},
		{"two sites one name", "[[site]]\nname = \"s\"\npath = \"/tmp/a\"\n[[site]]\nname = \"s\"\npath = \"/tmp/b\"\n", "site[1].name", "name = \"s\"\npath = \"/tmp/b\"", []string{`"s"`, "site[0]"}},
		{"two sites one path", "[[site]]\nname = \"a\"\npath = \"/tmp/a\"\n[[site]]\nname = \"b\"\npath = \"/tmp/a/\"\n", "site[1].path", "path = \"/tmp/a/\"", []string{"/tmp/a", "site[0]"}},
		{"two caches one name", "[[reclaim.cache]]\nname = \"c\"\npath = \"/srv/a\"\n[[reclaim.cache]]\nname = \"c\"\npath = \"/srv/b\"\n", "reclaim.cache[1].name", "name = \"c\"\npath = \"/srv/b\"", []string{"reclaim.cache[0]"}},
		{"two mounts one name", "[[mount]]\nname = \"m\"\npath = \"/mnt/a\"\n[[mount]]\nname = \"m\"\npath = \"/mnt/b\"\n", "mount[1].name", "name = \"m\"\npath = \"/mnt/b\"", []string{"mount[0]"}},
		{"two filesystems one path", "[[filesystem]]\npath = \"/\"\n[[filesystem]]\npath = \"/.\"\n", "filesystem[1].path", "path = \"/.\"", []string{`"/"`, "filesystem[0]"}},
		{"bad name", "[[site]]\nname = \"a b\"\npath = \"/tmp/a\"\n", "site[0].name", "name", []string{`"a b"`}},
		{"http on all interfaces", "[server]\nhttp = \"0.0.0.0:9477\"\n", "server.http", "http", []string{"0.0.0.0:9477", "loopback"}},
		{"http on a LAN address", "[server]\nhttp = \"192.168.1.1:9477\"\n", "server.http", "http", []string{"192.168.1.1"}},
		{"http without host", "[server]\nhttp = \":9477\"\n", "server.http", "http", []string{"loopback"}},
		{"http without port", "[server]\nhttp = \"127.0.0.1\"\n", "server.http", "http", []string{"127.0.0.1"}},
		{"http with a named port", "[server]\nhttp = \"localhost:http\"\n", "server.http", "http", []string{"port"}},
		{"http on a host name", "[server]\nhttp = \"example.com:9477\"\n", "server.http", "http", []string{"example.com"}},
		{"bad mode", "[server]\nmode = \"fast\"\n", "server.mode", "mode", []string{`"fast"`, "enforce", "observe"}},
		{"bad level", "[log]\nlevel = \"trace\"\n", "log.level", "level", []string{`"trace"`}},
		{"bad format", "[log]\nformat = \"xml\"\n", "log.format", "format", []string{`"xml"`}},
		{"bad writer kind", "[server]\nwriters = [\"uid:1\", \"root\"]\n", "server.writers[1]", "writers", []string{`"root"`}},
		{"bad writer uid", "[server]\nwriters = [\n  \"uid:1000\",\n  \"uid:abc\",\n]\n", "server.writers[1]", "\"uid:abc\"", []string{`"abc"`}},
		{"unknown writer user", "[server]\nwriters = [\"user:no-such-user-sbx\"]\n", "server.writers[0]", "writers", []string{"no-such-user-sbx", "does not exist"}},
		{"unknown writer group", "[server]\nwriters = [\"group:no-such-group-sbx\"]\n", "server.writers[0]", "writers", []string{"no-such-group-sbx", "does not exist"}},
		{"unknown socket group", "[server]\nsocket_group = \"no-such-group-sbx\"\n", "server.socket_group", "socket_group", []string{"no-such-group-sbx"}},
		{"bad site owner", "[[site]]\nname = \"s\"\npath = \"/tmp/s\"\nowner = \"group:root\"\n", "site[0].owner", "owner", []string{"group:root"}},
		{"socket mode not octal", "[server]\nsocket_mode = \"0680\"\n", "server.socket_mode", "socket_mode", []string{"0680", "octal"}},
		{"socket mode too big", "[server]\nsocket_mode = \"1777\"\n", "server.socket_mode", "socket_mode", []string{"1777", "0777"}},
		{"socket mode as integer", "[server]\nsocket_mode = 660\n", "server.socket_mode", "socket_mode", []string{"660", "octal"}},
		{"refresh_at 1", "[[mount]]\nname = \"m\"\npath = \"/mnt/m\"\nrefresh_at = 1.0\n", "mount[0].refresh_at", "refresh_at", []string{"1"}},
		{"refresh_at 0", "[[mount]]\nname = \"m\"\npath = \"/mnt/m\"\nrefresh_at = 0\n", "mount[0].refresh_at", "refresh_at", []string{"0"}},
		{"refresh_at nan", "[[mount]]\nname = \"m\"\npath = \"/mnt/m\"\nrefresh_at = nan\n", "mount[0].refresh_at", "refresh_at", []string{"NaN"}},
		{"bad ladder", "[[reclaim.cache]]\nname = \"c\"\npath = \"/srv/c\"\nladder = \"none\"\n", "reclaim.cache[0].ladder", "ladder", []string{`"none"`, "gc", "entries", "all"}},
		{"zero sample interval", "[health]\nsample_interval = \"0s\"\n", "health.sample_interval", "sample_interval", []string{"0s", "above zero"}},
		{"zero probe interval", "[[mount]]\nname = \"m\"\npath = \"/mnt/m\"\nprobe_interval = \"0s\"\n", "mount[0].probe_interval", "probe_interval", []string{"from 100ms"}},
		{"1ns probe interval", "[[mount]]\nname = \"m\"\npath = \"/mnt/m\"\nprobe_interval = \"1ns\"\n", "mount[0].probe_interval", "probe_interval", []string{"from 100ms"}},
		{"huge max_lifetime", "[jobs]\nmax_lifetime = \"2562047h\"\n", "jobs.max_lifetime", "max_lifetime", []string{"at most"}},
		{"zero deadline", "[launch]\ndeadline = \"0s\"\n", "launch.deadline", "deadline", []string{"above zero"}},
		{"unknown cache kind", "[reclaim]\nauto_caches = [\"pnpm\", \"bower\"]\n", "reclaim.auto_caches[1]", "auto_caches", []string{`"bower"`, "go-build"}},
		{"cache kind twice", "[reclaim]\nauto_caches = [\"pnpm\", \"pnpm\"]\n", "reclaim.auto_caches[1]", "auto_caches", []string{`"pnpm"`}},
		{"no runs per hour", "[reclaim]\nmax_runs_per_hour = 0\n", "reclaim.max_runs_per_hour", "max_runs_per_hour", []string{"0"}},
		{"negative max_files", "[[site]]\nname = \"s\"\npath = \"/tmp/s\"\nmax_files = -1\n", "site[0].max_files", "max_files", []string{"-1"}},
		{"negative need_inodes", "[launch]\nneed_inodes = -1\n", "launch.need_inodes", "need_inodes", []string{"-1"}},
		{"remount unit and command", "[[mount]]\nname = \"m\"\npath = \"/mnt/m\"\nremount_unit = \"m.service\"\nremount_command = [\"true\"]\n", "mount[0].remount_command", "remount_command", []string{"not both"}},
		{"empty program", "[[reclaim.cache]]\nname = \"c\"\npath = \"/srv/c\"\ncommand = [\"\", \"prune\"]\n", "reclaim.cache[0].command", "command", []string{"empty"}},
		{"string list of numbers", "[reclaim]\nprotect = [1, 2]\n", "reclaim.protect", "protect", []string{"strings"}},
		{"table where a list belongs", "[site]\nname = \"s\"\n", "site", "[site]", []string{"[[site]]"}},
		{"value where a table belongs", "log = \"debug\"\n", "log", "log", []string{"table"}},
		{"socket path too long", "[server]\nsocket = \"/" + strings.Repeat("s", 120) + "\"\n", "server.socket", "socket", []string{"107"}},
		{"jobs ttl zero", "[jobs]\ndefault_ttl = \"0s\"\n", "jobs.default_ttl", "default_ttl", []string{"0s"}},
		{"jobs ttl above the cap", "[jobs]\ndefault_ttl = \"2h\"\nmax_lifetime = \"1h\"\n", "jobs.default_ttl", "default_ttl", []string{"2h0m0s", "max_lifetime"}},
		{"jobs relative root", "[jobs]\ncgroup_root = \"sys/fs/cgroup\"\n", "jobs.cgroup_root", "cgroup_root", []string{"sys/fs/cgroup"}},
		{"jobs negative grace", "[jobs]\ngrace = \"-1s\"\n", "jobs.grace", "grace", []string{"-1s"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wantProblem(t, tc.src, tc.key, tc.marker, tc.contains...)
		})
	}
}

func TestAccepted(t *testing.T) {
	for _, src := range []string{
		// A protected path inside a cache root's parent, or containing the cache, is fine.
		"[reclaim]\nprotect = [\"/srv\"]\n[[reclaim.cache]]\nname = \"c\"\npath = \"/srv/cache\"\n",
		// A size and a percent cannot be compared without the filesystem.
		"[[filesystem]]\npath = \"/\"\nreclaim_below = \"5%\"\nreplace_below = \"2GiB\"\n",
		"[[filesystem]]\npath = \"/\"\nreclaim_below = \"1GiB\"\nreplace_below = \"1GiB\"\n",
		"[server]\nhttp = \"127.0.0.1:9477\"\n",
		"[server]\nhttp = \"127.1.2.3:1\"\n",
		"[server]\nhttp = \"[::1]:9477\"\n",
		"[server]\nhttp = \"localhost:9477\"\n",
		"[server]\nhttp = \"LOCALHOST:9477\"\n",
		"[server]\nwriters = [\"uid:1000\", \"gid:100\", \"user:root\", \"group:root\"]\nsocket_group = \"0\"\nsocket_mode = \"0o600\"\n",
		"[[site]]\nname = \"s\"\npath = \"/tmp/s\"\nowner = \"uid:1000\"\n",
		"[[site]]\nname = \"s\"\npath = \"/tmp/s\"\nowner = \"user:root\"\n",
		"[[mount]]\nname = \"m\"\npath = \"/mnt/m\"\nrefresh_at = 0.5\nmax_remounts_per_hour = 0\n",
		"[[filesystem]]\npath = \"/\"\nreplace_below = 0\nreclaim_below = 0\n",
	} {
		mustParse(t, src)
	}
}

func TestSeveralProblemsTogether(t *testing.T) {
	src := readFile(t, "testdata/badvalues.toml")
	ps := problemsOf(t, src)
	want := map[string]string{
		"version":                     "version = 2",
		"server.socket_mode":          "socket_mode",
		"server.http":                 "http",
		"server.mode":                 "\nmode = ",
		"filesystem[0].path":          "path = \"relative\"",
		"filesystem[0].replace_below": "replace_below",
		"site[0].name":                "[[site]]",
		"site[0].path":                "path = \"/home/x\"",
		"site[0].max_age":             "max_age",
		"reclaim.auto_caches[0]":      "auto_caches",
		"reclaim.cache[0].path":       "path = \"/\"",
		"reclaim.cache[0].ladder":     "ladder",
		"mount[0].refresh_at":         "refresh_at",
		"mount[0].probe_interval":     "probe_interval",
		"mount[0].links[0].path":      "links",
		"mount[0].links[0].target":    "links",
	}
	got := map[string]int{}
	last := 0
	for _, p := range ps {
		got[p.Key] = p.Line
		if p.Line < last && p.Line != 0 {
			t.Errorf("problems out of line order: %v", p)
		}
		last = p.Line
	}
	for key, marker := range want {
		line, ok := got[key]
		if !ok {
			t.Errorf("no problem about %s", key)
		} else if wl := lineOf(t, src, marker); line != wl {
			t.Errorf("%s on line %d, want %d", key, line, wl)
		}
	}
	if len(ps) != len(want) {
		t.Errorf("%d problems, want %d:\n%v", len(ps), len(want), &ValidationError{Problems: ps})
	}
	// The error prints one problem per line, each with file and line.
	ve := &ValidationError{Problems: ps}
	if lines := strings.Split(ve.Error(), "\n"); len(lines) != len(ps) || !strings.HasPrefix(lines[0], "t.toml:1: version: ") {
		t.Errorf("Error() = %q", ve.Error())
	}
}

func TestValidateBuiltConfig(t *testing.T) {
	c := mustParse(t, "")
	c.Sites = append(c.Sites, Site{Name: "aura-bg", Path: "x", MaxAge: -1})
	c.Reclaim.Caches = []Cache{{Name: "c", Path: "/home"}}
	err := c.Validate()
	ve, ok := err.(*ValidationError)
	if !ok {
		t.Fatalf("Validate = %v", err)
	}
	keys := map[string]bool{}
	for _, p := range ve.Problems {
		keys[p.Key] = true
		if p.Line != 0 || p.File != "" {
			t.Errorf("a built config has no lines: %v", p)
		}
	}
	for _, k := range []string{"site[1].name", "site[1].path", "site[1].max_age", "reclaim.cache[0].path", "reclaim.cache[0].ladder"} {
		if !keys[k] {
			t.Errorf("no problem about %s in %v", k, err)
		}
	}
}

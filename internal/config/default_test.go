package config

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

// The schema decodes exactly the keys the Config types are tagged with.
func TestSchemaMatchesTags(t *testing.T) {
	c := &Config{}
	var m Mount
	for _, tc := range []struct {
		fields []field
		v      any
	}{
		{topFields(c), Config{}}, {serverFields(&c.Server), Server{}}, {logFields(&c.Log), Log{}},
		{metricsFields(&c.Metrics), Metrics{}},
		{healthFields(&c.Health), Health{}}, {launchFields(&c.Launch), Launch{}},
		{filesystemFields(&Filesystem{}), Filesystem{}}, {siteFields(&Site{}), Site{}},
		{reclaimFields(&c.Reclaim), Reclaim{}}, {cacheFields(&Cache{}), Cache{}},
		{mountFields(&m), Mount{}}, {linkFields(&Link{}), Link{}},
	} {
		var names, tags []string
		for _, f := range tc.fields {
			names = append(names, f.name)
		}
		rt := reflect.TypeOf(tc.v)
		for i := 0; i < rt.NumField(); i++ {
			tags = append(tags, rt.Field(i).Tag.Get("toml"))
		}
		if !slices.Equal(names, tags) {
			t.Errorf("%s: schema keys %v, toml tags %v", rt.Name(), names, tags)
		}
	}
}

// exampleBlock uncomments the example block of default.toml that starts with header.
func exampleBlock(t *testing.T, header string) string {
	t.Helper()
	lines := strings.Split(Default(), "\n")
	start := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "# "+header) })
	if start < 0 {
		t.Fatalf("default.toml has no example %s", header)
	}
	var b strings.Builder
	b.WriteString(header + "\n")
	for _, l := range lines[start+1:] {
		if !strings.HasPrefix(l, "# ") {
			break
		}
		b.WriteString(strings.TrimPrefix(l, "# ") + "\n")
	}
	return b.String()
}

// The per-entry defaults in Go are the values default.toml shows, for the live entries
// and for the commented-out examples alike; and the examples are valid config.
func TestEntryDefaultsMatchDefaultTOML(t *testing.T) {
	c := mustParse(t, "")
	fs := DefaultFilesystem()
	fs.Path = c.Filesystems[0].Path
	if !reflect.DeepEqual(c.Filesystems[0], fs) {
		t.Errorf("default.toml's filesystem %+v, DefaultFilesystem %+v", c.Filesystems[0], fs)
	}
	s := DefaultSite()
	s.Name, s.Path = c.Sites[0].Name, c.Sites[0].Path
	if !reflect.DeepEqual(c.Sites[0], s) {
		t.Errorf("default.toml's site %+v, DefaultSite %+v", c.Sites[0], s)
	}

	ex := mustParse(t, exampleBlock(t, "[[reclaim.cache]]"))
	ca := DefaultCache()
	ca.Name, ca.Path, ca.Command = "pnpm-shared", "/srv/pnpm-store", []string{"pnpm", "store", "prune"}
	if !reflect.DeepEqual(ex.Reclaim.Caches, []Cache{ca}) {
		t.Errorf("cache example %+v, DefaultCache %+v", ex.Reclaim.Caches, ca)
	}
	ex = mustParse(t, exampleBlock(t, "[[mount]]"))
	m := DefaultMount()
	m.Name, m.Path = "agent", "/mnt/agent"
	if !reflect.DeepEqual(ex.Mounts, []Mount{m}) {
		t.Errorf("mount example %+v, DefaultMount %+v", ex.Mounts, m)
	}
}

// Every key in default.toml, live or in an example, is documented: by a comment at the
// end of its line or by the comment just above it. And every key of the schema appears.
func TestDefaultDocumentsEveryKey(t *testing.T) {
	lines := strings.Split(Default(), "\n")
	seen := map[string]bool{}
	prevComment := false
	for i, l := range lines {
		body, example := l, strings.HasPrefix(l, "# ") && isKeyLine(strings.TrimPrefix(l, "# "))
		if example {
			body = strings.TrimPrefix(l, "# ")
		}
		if isKeyLine(body) {
			key := strings.TrimSpace(body[:strings.Index(body, "=")])
			seen[key] = true
			trailing := strings.Contains(valueAndComment(body), "#")
			if !trailing && (example || !prevComment) {
				t.Errorf("default.toml:%d: key %s is not documented", i+1, key)
			}
		}
		prevComment = strings.HasPrefix(l, "#") && !example
	}
	c := &Config{}
	var all []field
	all = append(all, topFields(c)...)
	all = append(all, serverFields(&c.Server)...)
	all = append(all, logFields(&c.Log)...)
	all = append(all, metricsFields(&c.Metrics)...)
	all = append(all, healthFields(&c.Health)...)
	all = append(all, launchFields(&c.Launch)...)
	all = append(all, filesystemFields(&Filesystem{})...)
	all = append(all, siteFields(&Site{})...)
	all = append(all, reclaimFields(&c.Reclaim)...)
	all = append(all, cacheFields(&Cache{})...)
	all = append(all, mountFields(&Mount{})...)
	all = append(all, runtimeMountsFields(&c.RuntimeMounts)...)
	all = append(all, jobsFields(&c.Jobs)...)
	for _, f := range all {
		switch f.name {
		case "server", "log", "metrics", "health", "launch", "filesystem", "site", "reclaim", "cache", "mount", "mounts", "jobs":
			continue // tables, shown as headers
		}
		if !seen[f.name] {
			t.Errorf("default.toml does not show key %s", f.name)
		}
	}
}

func isKeyLine(l string) bool {
	i := strings.Index(l, "=")
	if i <= 0 || strings.HasPrefix(l, "#") || strings.HasPrefix(l, "[") {
		return false
	}
	k := strings.TrimSpace(l[:i])
	return k != "" && strings.Trim(k, "abcdefghijklmnopqrstuvwxyz_") == ""
}

// valueAndComment is the text after "key =", with quoted strings blanked so a "#" in
// a value does not count as a comment.
func valueAndComment(l string) string {
	v := l[strings.Index(l, "=")+1:]
	var b strings.Builder
	in := false
	for _, r := range v {
		if r == '"' {
			in = !in
		}
		if !in {
			b.WriteRune(r)
		}
	}
	return b.String()
}

package config

import (
	"reflect"
	"testing"
)

// The scanner must follow everything that changes which table a line belongs to.
func TestScanPositions(t *testing.T) {
	src := `# comment with [[site]] and key = 1
version = 1
server.socket = "/a"          # dotted key at top level
[ server ]
"socket_mode" = "0600"
writers = [
  "uid:1",   # [not a table]
  'user:x',
]
note = """
[[site]]
fake = 1
"""
[[site]]
name = "a"
[[ site ]]
name = "b" # second
[site.extra]
deep = 1
[[reclaim.cache]]
name = 'c'
[[mount]]
name = "m"
links = [{path = "/p", target = "/t"}, { path = "/q" , 'target' = "/u" }]
[[mount.links]]
path = "/r"
[[mount]]
[[mount.links]]
x.y.z = true
`
	want := map[string]int{
		"version":                  2,
		"server":                   3,
		"server.socket":            3,
		"server.socket_mode":       5,
		"server.writers":           6,
		"server.writers[0]":        7,
		"server.writers[1]":        8,
		"server.note":              10,
		"site":                     14,
		"site[0]":                  14,
		"site[0].name":             15,
		"site[1]":                  16,
		"site[1].name":             17,
		"site[1].extra":            18,
		"site[1].extra.deep":       19,
		"reclaim":                  20,
		"reclaim.cache[0]":         20,
		"reclaim.cache[0].name":    21,
		"mount[0].name":            23,
		"mount[0].links":           24,
		"mount[0].links[0].path":   24,
		"mount[0].links[1].target": 24,
		"mount[0].links[0]":        24,
		"mount[1]":                 27,
		"mount[1].links[0]":        28,
		"mount[1].links[0].x.y.z":  29,
	}
	got := scanPositions([]byte(src)).lines
	for k, line := range want {
		if got[k] != line {
			t.Errorf("%s: line %d, want %d", k, got[k], line)
		}
	}
	for _, k := range []string{"fake", "site[2]", "site[0].fake", "server.note.fake"} {
		if _, ok := got[k]; ok {
			t.Errorf("%s found inside a string or comment", k)
		}
	}
}

// Unknown keys are errors naming the key and its line, wherever they are.
func TestUnknownKeyLines(t *testing.T) {
	src := `version = 1
bogus = 1
[server]
sockets = "/x"
[[site]]
name = "a"
path = "/tmp/a"
[[site]]
name = "b"
path = "/tmp/b"
maxage = "1h"
[site.extra]
[[reclaim.cache]]
name = "c"
path = "/srv/c"
"comand" = ["x"]
[[mount]]
name = "m"
path = "/mnt/m"
links = [
  {path = "/srv/l", target = "/mnt/m"},
  {path = "/srv/k", target = "/mnt/m", mode = "0644"},
]
server.extra = 1
`
	wants := []struct {
		key, marker, msg string
	}{
		{"bogus", "bogus", `unknown key "bogus"`},
		{"server.sockets", "sockets", `(did you mean "socket"?)`},
		{"site[1].maxage", "maxage", `(did you mean "max_age"?)`},
		{"site[1].extra", "[site.extra]", `unknown key "extra"`},
		{"reclaim.cache[0].comand", `"comand"`, `(did you mean "command"?)`},
		{"mount[0].links[1].mode", `mode = "0644"`, `unknown key "mode"`},
		{"mount[0].server", "server.extra", `unknown key "server"`},
	}
	ps := problemsOf(t, src)
	if len(ps) != len(wants) {
		t.Errorf("got %d problems, want %d:\n%v", len(ps), len(wants), &ValidationError{Problems: ps})
	}
	for _, w := range wants {
		wantProblem(t, src, w.key, w.marker, w.msg)
	}
}

func TestSyntaxErrorHasLine(t *testing.T) {
	ps := problemsOf(t, "version = 1\n[server]\nsocket = /x\n")
	if len(ps) != 1 || ps[0].Line != 3 || ps[0].File != "t.toml" {
		t.Errorf("syntax error = %+v", ps)
	}
	ps = problemsOf(t, "[server]\nsocket = \"/a\"\nsocket = \"/b\"\n")
	if len(ps) != 1 || ps[0].Line != 3 {
		t.Errorf("duplicate key = %+v", ps)
	}
}

func TestPositionsOnBrokenInput(t *testing.T) {
	// The scanner runs only after the parser accepted the text, but must not panic or
	// stall on anything.
	for _, src := range []string{"", "[", "[[", "a = [", "a = {", `a = "`, `a = """`, "a = '''x", "= = =", "\\", "[a.\"b", "a = [{b = ["} {
		got := scanPositions([]byte(src))
		if got == nil {
			t.Fatalf("nil positions for %q", src)
		}
	}
	if p := (*positions)(nil); p.line("x") != 0 {
		t.Error("nil positions have a line")
	}
	if !reflect.DeepEqual(scanPositions([]byte("a=1")).lines, map[string]int{"a": 1}) {
		t.Error("a=1")
	}
}

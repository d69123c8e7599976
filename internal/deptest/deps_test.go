package deptest

import (
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/sandboxd/sandboxd"

// The module's top-level directories that are not capabilities. Every other top-level
// package (pressure, retention, reclaim, mountwatch, jobs, systemd, and whatever moves in
// next) is a capability, with its subpackages: a new one is covered without editing this.
// backtest is a composition root like daemon (it drives pressure's and reclaim's real code
// on a simulated clock for `sandboxd backtest` and the fleet simulator), so it may import
// capabilities; none may import it (the rule on daemon, cmd and client).
var notCapabilities = []string{"cmd", "daemon", "api", "client", "internal", "packaging", "backtest"}

// A rule says which imports a package may not have, and why. forbids gets the importing
// package and an import (both as module-relative paths, or the full path of a package
// outside the module) and reports whether the import breaks the rule.
type rule struct {
	name    string
	why     string
	applies func(pkg string) bool
	forbids func(pkg string, imp pkg) bool
}

// pkg is an import as the rules see it.
type pkg struct {
	path     string // module-relative ("reclaim", "internal/safefs"); full path outside the module
	inModule bool
	std      bool
}

var rules = []rule{
	{
		name: "capabilities never import each other",
		why: "each capability (pressure, retention, reclaim, mountwatch, jobs, systemd) must be " +
			"changeable, testable and understood on its own; what one needs of another is a small " +
			"interface declared where it is used and wired in daemon/ (STYLE 5). One import " +
			"between two of them makes a change in one break the other's build and lets cycles " +
			"in as capabilities move in",
		applies: isCapability,
		forbids: func(p string, imp pkg) bool {
			return imp.inModule && isCapability(imp.path) && top(imp.path) != top(p)
		},
	},
	{
		name: "capabilities import neither daemon, cmd, client nor backtest",
		why: "daemon is the composition root that imports every capability, cmd is main, and the " +
			"client is what runners call over the socket: a capability importing one of them " +
			"would be a cycle or would talk to its own daemon through the socket",
		applies: isCapability,
		forbids: func(_ string, imp pkg) bool {
			return imp.inModule && slices.Contains([]string{"daemon", "cmd", "client", "backtest"}, top(imp.path))
		},
	},
	{
		name: "internal/ never imports a capability",
		why: "internal/* (safefs, config, state, testenv...) are the leaves every capability " +
			"builds on; one that imported a capability could not be used by that capability " +
			"without a cycle, and would let one capability reach another through it",
		applies: func(p string) bool { return top(p) == "internal" },
		forbids: func(_ string, imp pkg) bool {
			return imp.inModule && (isCapability(imp.path) ||
				slices.Contains([]string{"daemon", "cmd", "client"}, top(imp.path)))
		},
	},
	{
		name: "api and client stay standard library only",
		why: "runners embed the client (and api, the wire contract) in their own programs: " +
			"every dependency of ours would become theirs (build time, licences, CVE " +
			"notices, version conflicts with their Prometheus or systemd libraries), and the " +
			"contract must compile wherever Go does. The client may use api and nothing else " +
			"of this module",
		applies: func(p string) bool { return p == "api" || p == "client" },
		forbids: func(_ string, imp pkg) bool {
			return !imp.std && !(imp.inModule && imp.path == "api")
		},
	},
	{
		name: "only cmd imports daemon",
		why: "daemon wires every capability together; anything else importing it pulls in " +
			"all of them and makes a cycle the moment daemon wires that package",
		applies: func(p string) bool { return top(p) != "cmd" && top(p) != "daemon" },
		forbids: func(_ string, imp pkg) bool { return imp.inModule && top(imp.path) == "daemon" },
	},
}

// TestDependencies checks every rule against what each package of the module imports,
// directly, in its code and in its tests, and, for api and client, everything their code
// depends on (go list -deps: an indirect import reaches runners just as well).
func TestDependencies(t *testing.T) {
	pkgs := goList(t, "./...")
	if len(pkgs) < 10 {
		t.Fatalf("go list found only %d packages of the module", len(pkgs))
	}
	std := map[string]bool{}
	for _, p := range goList(t, "std") {
		std[p.ImportPath] = true
	}
	asPkg := func(path string) pkg {
		rel, in := strings.CutPrefix(path, module+"/")
		if !in {
			rel = path
		}
		return pkg{path: rel, inModule: in, std: std[path]}
	}
	seen := map[string]bool{}
	for _, p := range pkgs {
		rel, ok := strings.CutPrefix(p.ImportPath, module+"/")
		if !ok {
			continue // the module root (deps.go, build-tagged tools)
		}
		seen[top(rel)] = true
		imports := slices.Concat(p.Imports, p.TestImports, p.XTestImports)
		if rel == "api" || rel == "client" {
			imports = append(imports, p.Deps...)
		}
		for _, r := range rules {
			if !r.applies(rel) {
				continue
			}
			for _, imp := range imports {
				if imp == p.ImportPath || imp == "C" {
					continue
				}
				if ip := asPkg(imp); r.forbids(rel, ip) {
					t.Errorf("%s imports %s: %s (%s)", rel, ip.path, r.name, r.why)
				}
			}
		}
	}
	// The rules only hold if the layout is what they assume.
	for _, want := range []string{"api", "client", "daemon", "cmd", "internal", "pressure", "retention", "reclaim", "mountwatch", "systemd"} {
		if !seen[want] {
			t.Errorf("no package under %s/: the rules above name it; update them with the layout", want)
		}
	}
}

// The rules must catch what they are for: each forbids a case it names.
func TestRulesCatchTheirCase(t *testing.T) {
	in := func(p string) pkg { return pkg{path: p, inModule: true} }
	cases := []struct {
		rule int
		from string
		imp  pkg
	}{
		{0, "reclaim", in("retention")},
		{0, "jobs/cgroup", in("mountwatch")},
		{1, "retention", in("client")},
		{2, "internal/safefs", in("reclaim")},
		{2, "internal/config", in("jobs")},
		{3, "client", pkg{path: "github.com/prometheus/client_golang/prometheus"}},
		{3, "api", in("internal/units")},
		{4, "pressure", in("daemon")},
	}
	for _, c := range cases {
		r := rules[c.rule]
		if !r.applies(c.from) || !r.forbids(c.from, c.imp) {
			t.Errorf("rule %q lets %s import %s", r.name, c.from, c.imp.path)
		}
	}
	// ...and allows what the layering allows.
	allowed := []struct {
		from string
		imp  pkg
	}{
		{"reclaim", in("api")}, {"reclaim", in("internal/safefs")}, {"jobs/cgroup", in("jobs")},
		{"client", in("api")}, {"api", pkg{path: "net/http", std: true}}, {"daemon", in("reclaim")},
		{"cmd/sandboxd", in("daemon")}, {"retention", pkg{path: "github.com/fsnotify/fsnotify"}},
	}
	for _, a := range allowed {
		for _, r := range rules {
			if r.applies(a.from) && r.forbids(a.from, a.imp) {
				t.Errorf("rule %q forbids %s importing %s, which the layering allows", r.name, a.from, a.imp.path)
			}
		}
	}
}

func isCapability(p string) bool { return !slices.Contains(notCapabilities, top(p)) }

// top is the first element of a module-relative path.
func top(p string) string { t, _, _ := strings.Cut(p, "/"); return t }

type listed struct {
	ImportPath                         string
	Imports, TestImports, XTestImports []string
	Deps                               []string
}

func goList(t *testing.T, pattern string) []listed {
	t.Helper()
	cmd := exec.Command("go", "list", "-e", "-json=ImportPath,Imports,TestImports,XTestImports,Deps", pattern)
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list %s: %v\n%s", pattern, err, ee.Stderr)
		}
		t.Fatalf("go list %s: %v", pattern, err)
	}
	var all []listed
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p listed
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list %s: decode: %v", pattern, err)
		}
		all = append(all, p)
	}
	return all
}

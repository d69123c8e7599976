package daemon

import (
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/sandboxd/sandboxd/api"
)

// The runner clients' types checked against docs/openapi.yaml (issue 26): clients/node's
// index.d.ts has one interface and clients/python's sandboxd/types.py one TypedDict per
// schema an answer can carry, each with exactly the schema's fields; both clients' code
// tables list exactly the document's error codes, with the status and CLI exit status the
// daemon gives them.

// clientTypeName is the document's schema name of a client type.
var clientTypeName = map[string]string{"JobInfo": "Job", "ProblemDocument": "Problem"}

// answerSchemas are the component schemas an answer of the document can carry.
func answerSchemas(doc *openapi3.T) map[string]*openapi3.Schema {
	out := map[string]*openapi3.Schema{}
	var walk func(s *openapi3.SchemaRef)
	walk = func(s *openapi3.SchemaRef) {
		if s == nil || s.Value == nil {
			return
		}
		if s.Ref != "" {
			name := s.Ref[strings.LastIndex(s.Ref, "/")+1:]
			if _, ok := out[name]; ok {
				return
			}
			if len(s.Value.Properties) > 0 {
				out[name] = s.Value
			}
		}
		v := s.Value
		for _, p := range v.Properties {
			walk(p)
		}
		walk(v.Items)
		walk(v.AdditionalProperties.Schema)
		for _, l := range [][]*openapi3.SchemaRef{v.OneOf, v.AnyOf, v.AllOf} {
			for _, x := range l {
				walk(x)
			}
		}
	}
	for _, path := range doc.Paths.Map() {
		for _, op := range path.Operations() {
			for _, r := range op.Responses.Map() {
				if r.Value == nil {
					continue
				}
				for _, mt := range r.Value.Content {
					walk(mt.Schema)
				}
			}
		}
	}
	return out
}

// typesIn parses the declared types of a client file: block is a regexp whose first group
// is the type's name and second its body; field one whose first group is a field name.
func typesIn(t *testing.T, file string, block, field *regexp.Regexp) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, m := range block.FindAllStringSubmatch(string(b), -1) {
		var fs []string
		for _, f := range field.FindAllStringSubmatch(m[2], -1) {
			fs = append(fs, f[1])
		}
		sort.Strings(fs)
		out[m[1]] = fs
	}
	return out
}

func schemaFields(s *openapi3.Schema) []string {
	var fs []string
	for k := range s.Properties {
		fs = append(fs, k)
	}
	sort.Strings(fs)
	return fs
}

func TestClientTypesMatchOpenAPI(t *testing.T) {
	doc := openAPIDoc(t)
	answers := answerSchemas(doc)
	clients := map[string]map[string][]string{
		"clients/node/index.d.ts": typesIn(t, "../clients/node/index.d.ts",
			regexp.MustCompile(`(?m)^export interface (\w+) \{\n((?:.*\n)*?)\}`), regexp.MustCompile(`(?m)^  (\w+)\??:`)),
		"clients/python/src/sandboxd/types.py": typesIn(t, "../clients/python/src/sandboxd/types.py",
			regexp.MustCompile(`(?m)^class (\w+)\(TypedDict, total=False\):\n((?:    .*\n)+)`), regexp.MustCompile(`(?m)^    (\w+):`)),
	}
	for file, types := range clients {
		have := map[string]bool{}
		for name, fields := range types {
			schemaName := name
			if n, ok := clientTypeName[name]; ok {
				schemaName = n
			}
			ref := doc.Components.Schemas[schemaName]
			if ref == nil {
				continue // a client's own type (options and the like)
			}
			have[schemaName] = true
			if want := schemaFields(ref.Value); strings.Join(fields, ",") != strings.Join(want, ",") {
				t.Errorf("%s: %s has fields %v; docs/openapi.yaml's %s has %v", file, name, fields, schemaName, want)
			}
		}
		for name := range answers {
			if !have[name] {
				t.Errorf("%s has no type for docs/openapi.yaml's %s, which answers carry", file, name)
			}
		}
	}

	// The error codes: the document's enum, both clients' tables, and what they map to.
	var enum []string
	for _, e := range doc.Components.Schemas["Problem"].Value.Properties["code"].Value.Enum {
		enum = append(enum, e.(string))
	}
	sort.Strings(enum)
	known := map[api.Code]bool{}
	for _, c := range api.Codes {
		known[c] = true
		if !contains(enum, string(c)) {
			t.Errorf("docs/openapi.yaml's code enum lacks %s, which the daemon answers", c)
		}
	}
	tables := map[string]*regexp.Regexp{
		"../clients/node/index.js":                  regexp.MustCompile(`(?m)^  (\w+): \[(\d+), (\d+)\],`),
		"../clients/python/src/sandboxd/_errors.py": regexp.MustCompile(`(?m)^    "(\w+)": \((\d+), (\d+)\),`),
	}
	for file, re := range tables {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var codes []string
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			codes = append(codes, m[1])
			status, _ := strconv.Atoi(m[2])
			exit, _ := strconv.Atoi(m[3])
			c := api.Code(m[1])
			if known[c] && (status != c.Status() || exit != c.ExitCode()) {
				t.Errorf("%s: %s is (%d, %d); the daemon answers it with %d and the CLI exits %d", file, c, status, exit, c.Status(), c.ExitCode())
			}
		}
		sort.Strings(codes)
		if strings.Join(codes, ",") != strings.Join(enum, ",") {
			t.Errorf("%s's code table %v, docs/openapi.yaml's enum %v", file, codes, enum)
		}
	}
	b, _ := os.ReadFile("../clients/node/index.d.ts")
	m := regexp.MustCompile(`(?s)export type Code =(.*?);`).FindStringSubmatch(string(b))
	if m == nil {
		t.Fatal("index.d.ts declares no Code type")
	}
	var lits []string
	for _, l := range regexp.MustCompile(`'(\w+)'`).FindAllStringSubmatch(m[1], -1) {
		lits = append(lits, l[1])
	}
	sort.Strings(lits)
	if strings.Join(lits, ",") != strings.Join(enum, ",") {
		t.Errorf("index.d.ts's Code %v, docs/openapi.yaml's enum %v", lits, enum)
	}
}

package daemon

import (
	"flag"
	"fmt"
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
	if *updateClientTypes {
		writeClientTypes(t, doc)
	}
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

// The wire types of both clients are generated from docs/openapi.yaml: after a change to
// the document, `go test ./daemon -run TestClientTypesMatchOpenAPI -update` rewrites them
// (the part of index.d.ts after its wire-types marker, the classes of types.py).
var updateClientTypes = flag.Bool("update", false, "rewrite the clients' wire types from docs/openapi.yaml")

const (
	tsMarker = "// --- wire types: generated from docs/openapi.yaml by daemon/openapi_clients_test.go (-update);\n// one interface per schema an answer carries (JobInfo is its Job, ProblemDocument its Problem) ---\n"
	pyMarker = "# --- generated from docs/openapi.yaml by daemon/openapi_clients_test.go (-update) ---\n"
)

// clientName is the client type name of a schema.
func clientName(schema string) string {
	for c, s := range clientTypeName {
		if s == schema {
			return c
		}
	}
	return schema
}

func refName(ref string) string { return ref[strings.LastIndex(ref, "/")+1:] }

func tsType(s *openapi3.SchemaRef) string {
	if s.Ref != "" {
		switch n := refName(s.Ref); n {
		case "Duration":
			return "string"
		case "Size":
			return "number | string"
		case "Problem":
			return "ProblemDocument"
		default:
			return clientName(n)
		}
	}
	v := s.Value
	var parts []string
	for _, typ := range v.Type.Slice() {
		switch typ {
		case "string":
			if s.Value == nil || len(v.Enum) == 0 {
				parts = append(parts, "string")
				continue
			}
			var es []string
			for _, e := range v.Enum {
				if e != nil {
					es = append(es, strconv.Quote(e.(string)))
				}
			}
			parts = append(parts, strings.Join(es, " | "))
		case "integer", "number":
			parts = append(parts, "number")
		case "boolean":
			parts = append(parts, "boolean")
		case "null":
			parts = append(parts, "null")
		case "array":
			parts = append(parts, tsType(v.Items)+"[]")
		case "object":
			switch {
			case v.AdditionalProperties.Schema != nil:
				parts = append(parts, "Record<string, "+tsType(v.AdditionalProperties.Schema)+">")
			case len(v.Properties) > 0:
				var ps []string
				for _, k := range schemaFields(v) {
					ps = append(ps, k+"?: "+tsType(v.Properties[k]))
				}
				parts = append(parts, "{ "+strings.Join(ps, "; ")+" }")
			default:
				parts = append(parts, "Record<string, unknown>")
			}
		}
	}
	for _, o := range v.OneOf {
		parts = append(parts, tsType(o))
	}
	if len(parts) == 0 {
		return "unknown"
	}
	return strings.Join(parts, " | ")
}

func pyType(s *openapi3.SchemaRef) string {
	if s.Ref != "" {
		switch n := refName(s.Ref); n {
		case "Duration":
			return "str"
		case "Size":
			return "Union[int, str]"
		case "Problem":
			return `"ProblemDocument"`
		default:
			return `"` + clientName(n) + `"`
		}
	}
	v := s.Value
	var parts []string
	for _, typ := range v.Type.Slice() {
		switch typ {
		case "string":
			var es []string
			for _, e := range v.Enum {
				if e != nil {
					es = append(es, strconv.Quote(e.(string)))
				}
			}
			if len(es) > 0 {
				parts = append(parts, "Literal["+strings.Join(es, ", ")+"]")
			} else {
				parts = append(parts, "str")
			}
		case "integer":
			parts = append(parts, "int")
		case "number":
			parts = append(parts, "float")
		case "boolean":
			parts = append(parts, "bool")
		case "null":
			parts = append(parts, "None")
		case "array":
			parts = append(parts, "List["+pyType(v.Items)+"]")
		case "object":
			if v.AdditionalProperties.Schema != nil {
				parts = append(parts, "Dict[str, "+pyType(v.AdditionalProperties.Schema)+"]")
			} else {
				parts = append(parts, "Dict[str, Any]")
			}
		}
	}
	for _, o := range v.OneOf {
		parts = append(parts, pyType(o))
	}
	switch len(parts) {
	case 0:
		return "Any"
	case 1:
		return parts[0]
	}
	return "Union[" + strings.Join(parts, ", ") + "]"
}

// generatedSchemas are the schemas the clients type: every one an answer carries, and
// the request bodies the clients build from caller-supplied fields.
func generatedSchemas(doc *openapi3.T) []string {
	set := map[string]bool{"MountRegistration": true}
	for n := range answerSchemas(doc) {
		set[n] = true
	}
	var out []string
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func writeClientTypes(t *testing.T, doc *openapi3.T) {
	var ts, py strings.Builder
	for _, name := range generatedSchemas(doc) {
		s := doc.Components.Schemas[name].Value
		req := map[string]bool{}
		for _, r := range s.Required {
			req[r] = true
		}
		fmt.Fprintf(&ts, "\nexport interface %s {\n", clientName(name))
		fmt.Fprintf(&py, "\n\nclass %s(TypedDict, total=False):\n", clientName(name))
		for _, k := range schemaFields(s) {
			opt := "?"
			if req[k] {
				opt = ""
			}
			typ := tsType(s.Properties[k])
			if name == "Problem" && k == "code" {
				typ = "Code"
			}
			fmt.Fprintf(&ts, "  %s%s: %s;\n", k, opt, typ)
			fmt.Fprintf(&py, "    %s: %s\n", k, pyType(s.Properties[k]))
		}
		ts.WriteString("}\n")
	}
	for file, gen := range map[string]string{"../clients/node/index.d.ts": tsMarker + ts.String(), "../clients/python/src/sandboxd/types.py": pyMarker + py.String()} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		marker := gen[:strings.Index(gen, "\n")+1]
		head, _, ok := strings.Cut(string(b), marker)
		if !ok {
			t.Fatalf("%s has no marker %q", file, marker)
		}
		if err := os.WriteFile(file, []byte(head+gen), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

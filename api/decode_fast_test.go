package api

import (
	"fmt"
	"math/rand"
	"reflect"
	"strings"
	"testing"
)

// decodeBoth decodes body into a fresh value of each request type twice, by DecodeBody
// (which tries decodeFast) and by decodeFields alone, and fails when the values, the
// warnings or the errors differ.
func decodeBoth(t *testing.T, body []byte) (fast int) {
	t.Helper()
	for _, typ := range []reflect.Type{reflect.TypeOf(LaunchRequest{}), reflect.TypeOf(ResumeRequest{}), reflect.TypeOf(ReclaimRequest{}),
		reflect.TypeOf(JobRequest{}), reflect.TypeOf(HeartbeatRequest{}), reflect.TypeOf(MountRegistration{}), reflect.TypeOf(CredentialPush{})} {
		a, b := reflect.New(typ), reflect.New(typ)
		wa, ea := DecodeBody(body, a.Interface())
		var wb []string
		var eb error
		trimmed := []byte(strings.TrimSpace(string(body)))
		switch {
		case len(trimmed) == 0 || string(trimmed) == "null":
		case trimmed[0] != '{':
			eb = NewProblem(CodeBadRequest, "request body must be a JSON object")
		default:
			wb, eb = decodeFields(trimmed, b.Interface())
		}
		if !reflect.DeepEqual(a.Elem().Interface(), b.Elem().Interface()) || !reflect.DeepEqual(wa, wb) || fmt.Sprint(ea) != fmt.Sprint(eb) {
			t.Fatalf("%s from %q:\n DecodeBody   %+v warnings %q err %v\n decodeFields %+v warnings %q err %v",
				typ.Name(), body, a.Elem().Interface(), wa, ea, b.Elem().Interface(), wb, eb)
		}
		if c := reflect.New(typ); len(trimmed) > 0 && trimmed[0] == '{' && decodeFast(trimmed, c.Interface()) {
			fast++
		}
	}
	return fast
}

// TestDecodeFastIsDecodeFields: the one-Unmarshal way (decodeFast) decodes exactly what
// the field-by-field way did, with the same warnings and errors, over bodies made of the
// request types' own keys, their case variants, unknown and repeated keys, escaped keys,
// nulls, wrong types, nesting and trailing data.
func TestDecodeFastIsDecodeFields(t *testing.T) {
	keys := []string{"site", "need_bytes", "need_inodes", "mounts", "deadline", "job", "Site", "SITE", "sitE", "unknown",
		`si\u0074e`, "dry_run", "target_free", "release_reserve", "id", "pid", "ttl", "max_lifetime", "grace", "labels",
		"launch", "extend", "name", "path", "required", "probe_interval", "links", "credential_expires_at", "expires_at",
		"credential", "", "a b"}
	values := []string{`"bench"`, `"a\"b"`, `"\u00e9\ud800"`, `null`, `1`, `-1`, `1e400`, `"1GiB"`, `"-5s"`, `"2s"`, `3`, `true`,
		`["m"]`, `["m",1]`, `[]`, `{}`, `{"turn":"17"}`, `{"a":{"b":[1,{"c":null}]}}`, `"9223372036854775807"`, `"garbage"`,
		`"2026-12-01T10:15:00Z"`, `[{"path":"/a","target":"/b"}]`, `1.5`, `"x,y}"`, `"]"`, `"{"`, `"\\"`}
	r := rand.New(rand.NewSource(1206))
	bodies := []string{`{}`, ` { } `, `{"site":"bench"}`, `{"site":"bench"} `, `{"site":"bench"}{"site":"x"}`, `{"site":"bench"} x`,
		`{"site":"a","site":null}`, `{"site":"a","Site":"b"}`, `{"site":}`, `{"site" "a"}`, `{"site":"a",}`, `{,}`, `{"site":"a"`,
		`{"need_bytes":"1GiB","need_inodes":3,"mounts":["m"],"deadline":"2s","job":"j"}`, "{\"site\":\"a\"}\n", `{"si\u0074e":"a"}`}
	for range 20000 {
		var sb strings.Builder
		sb.WriteString([]string{"{", " {", "{\n"}[r.Intn(3)])
		for k := range r.Intn(5) {
			if k > 0 {
				sb.WriteString([]string{",", " , ", ",\n"}[r.Intn(3)])
			}
			fmt.Fprintf(&sb, `"%s":%s`, keys[r.Intn(len(keys))], values[r.Intn(len(values))])
		}
		sb.WriteString([]string{"}", " }", "}\n", "} {}", "", "}}", "]"}[r.Intn(7)])
		bodies = append(bodies, sb.String())
	}
	fast := 0
	for _, b := range bodies {
		fast += decodeBoth(t, []byte(b))
	}
	if fast < 1000 {
		t.Fatalf("only %d decodes took the fast way: the test does not exercise it", fast)
	}
}

// FuzzDecodeFastIsDecodeFields is TestDecodeFastIsDecodeFields on any body.
func FuzzDecodeFastIsDecodeFields(f *testing.F) {
	for _, s := range []string{`{}`, `{"site":"bench"}`, `{"site":"a","site":null}`, `{"Site":"a"}`, `{"si\u0074e":"a"}`,
		`{"need_bytes":"1GiB","need_inodes":3,"mounts":["m"],"deadline":"2s"}`, `{"labels":{"a":"b"},"ttl":"3m","pid":1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) { decodeBoth(t, body) })
}

func BenchmarkDecodeLaunchRequest(b *testing.B) {
	body := []byte(`{"site":"bench"}`)
	b.Run("fields", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var req LaunchRequest
			decodeFields(body, &req)
		}
	})
	b.Run("DecodeBody", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var req LaunchRequest
			DecodeBody(body, &req)
		}
	})
}

package daemon

import (
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/api"
)

// plainIsDecodeBody fails when plainLaunchBody accepts body but api.DecodeBody decodes
// it to another request, or with warnings or an error; it says whether it accepted.
func plainIsDecodeBody(t *testing.T, body []byte) bool {
	t.Helper()
	got, ok := plainLaunchBody(body)
	if !ok {
		return false
	}
	var want api.LaunchRequest
	warnings, err := api.DecodeBody(body, &want)
	if err != nil || warnings != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("from %q: plainLaunchBody %+v; api.DecodeBody %+v warnings %q err %v", body, got, want, warnings, err)
	}
	return true
}

// TestPlainLaunchBodyIsDecodeBody: every body the hand reader takes is decoded to what
// api.DecodeBody makes of it, with no warning and no error, over bodies of the launch
// request's keys, their case variants and escapes, unknown and repeated keys, strings
// with escapes, control characters, invalid UTF-8 and non-ASCII, non-string values,
// every kind of whitespace, and trailing data. The runner's common bodies take it.
func TestPlainLaunchBodyIsDecodeBody(t *testing.T) {
	// The runner's keys and plain values are drawn more often, so that many bodies are
	// plain and the comparison covers them.
	keys := []string{"site", "job", "site", "job", "site", "job", "Site", "JOB", "sitE", `si\u0074e`, "need_bytes", "mounts", "deadline", "unknown", "", "site "}
	values := []string{`"bench"`, `"bench"`, `"j-1"`, `"é"`, `""`, `"a b"`, `"a\"b"`, `"\u00e9"`, `"é"`, "\"\xff\"", "\"a\tb\"", "\"\x7f\"", `"\\"`,
		`"日本"`, "\"\xe2\x80\xa8\"", `null`, `1`, `true`, `["m"]`, `{}`, `"x,y}"`, `"{"`, `"`}
	spaces := []string{"", "", "", "", " ", "\n", "\t", "\r\n", "\v", "\f", "\u00a0"}
	sp := func(r *rand.Rand) string { return spaces[r.Intn(len(spaces))] }
	r := rand.New(rand.NewSource(27))
	bodies := []string{`{}`, ` { } `, `{"site":"bench"}`, `{"site":"bench","job":"j1"}`, `{"job":"j1","site":"bench"}`,
		"{\"site\":\"bench\"}\n", `{"site":"bench"}{}`, `{"site":"bench"} x`, `{"site":"a","site":"b"}`, `{"site":"a",}`,
		`{"site":"a"`, `{"site" "a"}`, `{,}`, `{"site":"a","job":null}`, `null`, `"site"`, `[]`, ``}
	for range 30000 {
		var sb strings.Builder
		sb.WriteString(sp(r) + []string{"{", "{", "{", "{", "[", ""}[r.Intn(6)] + sp(r))
		for k := range r.Intn(4) {
			if k > 0 {
				sb.WriteString(sp(r) + []string{",", ",", ",", ",", ";", ""}[r.Intn(6)] + sp(r))
			}
			fmt.Fprintf(&sb, `"%s"%s:%s%s`, keys[r.Intn(len(keys))], sp(r), sp(r), values[r.Intn(len(values))])
		}
		sb.WriteString(sp(r) + []string{"}", "}", "}", "}", "}", "", "}}", "} {}", "]"}[r.Intn(9)] + sp(r))
		bodies = append(bodies, sb.String())
	}
	plain := 0
	for _, b := range bodies {
		if plainIsDecodeBody(t, []byte(b)) {
			plain++
		}
	}
	if plain < 500 {
		t.Fatalf("only %d of %d bodies took the hand reader: the test does not exercise it", plain, len(bodies))
	}
	for _, b := range []string{`{"site":"bench"}`, `{"site":"bench","job":"j1"}`, ` {"job":"j1"} `, `{}`} {
		if _, ok := plainLaunchBody([]byte(b)); !ok {
			t.Errorf("%q: a runner's body not read by hand", b)
		}
	}
}

// FuzzPlainLaunchBody is TestPlainLaunchBodyIsDecodeBody on any body.
func FuzzPlainLaunchBody(f *testing.F) {
	for _, s := range []string{`{}`, `{"site":"bench"}`, `{"site":"a","job":"b"}`, `{"site":"a","site":"b"}`, `{"Site":"a"}`,
		`{"si\u0074e":"a"}`, "{\"site\":\"\xff\"}", `{"site":"a"} {}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) { plainIsDecodeBody(t, body) })
}

// TestDecodeLaunchIsDecodeRequest: decodeLaunch answers what api.DecodeRequest answers on
// the same request body: plain bodies, others, bodies longer and shorter than their
// declared length, of unknown length, too large, and bodies whose reader fails after
// some bytes.
func TestDecodeLaunchIsDecodeRequest(t *testing.T) {
	failing := errors.New("connection reset")
	type body struct {
		name string
		make func() io.Reader // a fresh reader of the body for each decoder
		n    int64            // its declared length (-1 unknown)
	}
	var cases []body
	for _, s := range []string{`{"site":"bench"}`, `{"site":"bench","job":"j"}`, `{"site":"a","need_bytes":"1GiB"}`, `{"site":"a","unknown":1}`,
		`{"site":"a\u0062"}`, `{"Site":"a"}`, `{"site":`, `[]`, `null`, ` `, `{"site":"a"} x`, strings.Repeat(" ", 600) + `{"site":"a"}`} {
		s := s
		for _, n := range []int64{int64(len(s)), -1, int64(len(s)) + 3, int64(len(s)) - 1} {
			if n == 0 {
				continue
			}
			cases = append(cases, body{fmt.Sprintf("%q declared %d", s, n), func() io.Reader { return strings.NewReader(s) }, n})
		}
		cases = append(cases, body{fmt.Sprintf("%q then a failure", s), func() io.Reader {
			return io.MultiReader(strings.NewReader(s), errReader{failing})
		}, int64(len(s))})
		cases = append(cases, body{fmt.Sprintf("%q failing at half", s), func() io.Reader {
			return io.MultiReader(strings.NewReader(s[:len(s)/2]), errReader{failing})
		}, int64(len(s))})
	}
	big := `{"site":"` + strings.Repeat("x", api.MaxBodyBytes) + `"}`
	cases = append(cases, body{"too large", func() io.Reader { return strings.NewReader(big) }, int64(len(big))})
	for _, c := range cases {
		req := httptest.NewRequest("POST", "/v1/launch", nil)
		req.Body, req.ContentLength = io.NopCloser(c.make()), c.n
		got, gw, gerr := decodeLaunch(req)
		var want api.LaunchRequest
		ww, werr := api.DecodeRequest(c.make(), &want)
		if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(gw, ww) || fmt.Sprint(gerr) != fmt.Sprint(werr) {
			t.Errorf("%s:\n decodeLaunch      %+v warnings %q err %v\n api.DecodeRequest %+v warnings %q err %v", c.name, got, gw, gerr, want, ww, werr)
		}
	}
}

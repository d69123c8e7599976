package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strings"
	"sync"
)

// DecodeRequest reads a JSON request body into v (a pointer to a request struct). It
// enforces CONTRACT §1: a body over MaxBodyBytes is payload_too_large, an empty body is
// {}, malformed JSON or a wrong type is bad_request naming the field, and unknown fields
// are not errors but come back as warnings for the answer. Errors are *Problem.
func DecodeRequest(r io.Reader, v any) (warnings []string, err error) {
	body, err := io.ReadAll(io.LimitReader(r, MaxBodyBytes+1))
	if err != nil {
		return nil, NewProblem(CodeBadRequest, "reading the request body: %v", err)
	}
	if len(body) > MaxBodyBytes {
		return nil, NewProblem(CodePayloadTooLarge, "request body is larger than %d bytes", MaxBodyBytes)
	}
	return DecodeBody(body, v)
}

// DecodeBody is DecodeRequest on a body already read and within the size limit.
func DecodeBody(body []byte, v any) (warnings []string, err error) {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		return nil, nil
	}
	if trimmed[0] != '{' {
		return nil, NewProblem(CodeBadRequest, "request body must be a JSON object")
	}
	if decodeFast(trimmed, v) {
		return nil, nil
	}
	return decodeFields(trimmed, v)
}

// decodeFields is DecodeBody's general way, one field at a time from the object's map;
// trimmed is a body that starts with '{'.
func decodeFields(trimmed []byte, v any) (warnings []string, err error) {
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	if err := dec.Decode(&raw); err != nil {
		return nil, NewProblem(CodeBadRequest, "malformed JSON: %v", err)
	}
	if dec.More() {
		return nil, NewProblem(CodeBadRequest, "malformed JSON: data after the request object")
	}
	known := knownFields(reflect.TypeOf(v))
	fields := make([]string, 0, len(raw))
	for k := range raw {
		fields = append(fields, k)
	}
	sort.Strings(fields)
	for _, k := range fields {
		f, ok := known[k]
		if !ok {
			warnings = append(warnings, fmt.Sprintf("unknown field %q ignored", k))
			continue
		}
		if err := json.Unmarshal(raw[k], reflect.ValueOf(v).Elem().FieldByIndex(f).Addr().Interface()); err != nil {
			var te *json.UnmarshalTypeError
			if errors.As(err, &te) {
				return warnings, NewProblem(CodeBadRequest, "field %q: want %s, got JSON %s", k, te.Type, te.Value)
			}
			return warnings, NewProblem(CodeBadRequest, "field %q: %v", k, err)
		}
	}
	return warnings, nil
}

// decodeFast decodes trimmed into v in one json.Unmarshal when that is sure to give what
// decodeFields gives (issue 27: the map, its copies and a decode per field were most of a
// launch's decoding): v points to a zero struct whose fields json names as jsonFields does,
// and the object's keys are all known, each once, unescaped (json would match a key
// such as "Site" or "SITE" to a field, where decodeFields warns that it is unknown and
// ignores it; of a repeated key, decodeFields takes the last value alone, json each in
// turn). Anything else, or any error, leaves v zero and reports false: decodeFields
// then decodes it and words what is wrong as it always did.
func decodeFast(trimmed []byte, v any) bool {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() || rv.Elem().Kind() != reflect.Struct || !rv.Elem().IsZero() {
		return false
	}
	t := rv.Elem().Type()
	if !fastDecodable(t) {
		return false
	}
	known := knownFields(t)
	var seen uint64
	ok := topLevelKeys(trimmed, func(key []byte) bool {
		f, ok := known[string(key)]
		if !ok || seen&(1<<f[0]) != 0 {
			return false
		}
		seen |= 1 << f[0]
		return true
	})
	if !ok {
		return false
	}
	if err := json.Unmarshal(trimmed, v); err != nil {
		rv.Elem().SetZero()
		return false
	}
	return true
}

// fastByType keeps fastDecodable's verdict per type.
var fastByType sync.Map // reflect.Type -> bool

// fastDecodable says json.Unmarshal names t's fields as jsonFields does: at most 64
// fields (decodeFast's key set), none embedded (json promotes an embedded struct's
// fields), and every tag a plain name of lower-case letters, digits and '_' with no
// option but omitempty (json ignores a tag name it finds invalid; ",string" changes
// what a field decodes from).
func fastDecodable(t reflect.Type) bool {
	if v, ok := fastByType.Load(t); ok {
		return v.(bool)
	}
	ok := t.NumField() <= 64
	for i := 0; ok && i < t.NumField(); i++ {
		f := t.Field(i)
		if f.Anonymous {
			ok = false
			break
		}
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || (opts != "" && opts != "omitempty") {
			ok = false
			break
		}
		for _, c := range name {
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_') {
				ok = false
				break
			}
		}
	}
	fastByType.Store(t, ok)
	return ok
}

// topLevelKeys calls key for every key of the JSON object b (b[0] is '{') in order, and
// reports false as soon as key does, or when a key holds an escape or a control
// character, or b does not look like an object. It checks only the structure it walks
// (strings, nesting, ':' and ','): json.Unmarshal checks the rest.
func topLevelKeys(b []byte, key func([]byte) bool) bool {
	i, n := 1, len(b)
	space := func() {
		for i < n && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
			i++
		}
	}
	space()
	if i < n && b[i] == '}' {
		return true
	}
	for {
		space()
		if i >= n || b[i] != '"' {
			return false
		}
		j := i + 1
		for ; j < n && b[j] != '"'; j++ {
			if b[j] == '\\' || b[j] < 0x20 {
				return false
			}
		}
		if j >= n || !key(b[i+1:j]) {
			return false
		}
		i = j + 1
		space()
		if i >= n || b[i] != ':' {
			return false
		}
		i++
		depth := 0
	value:
		for ; i < n; i++ {
			switch b[i] {
			case '"':
				for i++; i < n && b[i] != '"'; i++ {
					if b[i] == '\\' {
						i++
					}
				}
				if i >= n {
					return false
				}
			case '{', '[':
				depth++
			case '}', ']':
				if depth == 0 {
					return b[i] == '}'
				}
				depth--
			case ',':
				if depth == 0 {
					break value
				}
			}
		}
		if i >= n {
			return false
		}
		i++ // the ','
	}
}

// fieldsByType keeps jsonFields per request type: every launch and resume call decoded
// its body after building the same map by reflection again (issue 27, the per-command
// path). The maps are read only once stored.
var fieldsByType sync.Map // reflect.Type -> map[string][]int

func knownFields(t reflect.Type) map[string][]int {
	if m, ok := fieldsByType.Load(t); ok {
		return m.(map[string][]int)
	}
	m, _ := fieldsByType.LoadOrStore(t, jsonFields(t))
	return m.(map[string][]int)
}

// jsonFields maps the JSON names of a struct's fields to their index paths.
func jsonFields(t reflect.Type) map[string][]int {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	out := map[string][]int{}
	if t.Kind() != reflect.Struct {
		return out
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name := f.Name
		if tag, ok := f.Tag.Lookup("json"); ok {
			n, _, _ := strings.Cut(tag, ",")
			if n == "-" {
				continue
			}
			if n != "" {
				name = n
			}
		}
		out[name] = []int{i}
	}
	return out
}

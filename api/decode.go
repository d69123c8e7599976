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

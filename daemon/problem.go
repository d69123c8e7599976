package daemon

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"sync"

	"github.com/sandboxd/sandboxd/api"
)

// writeJSON writes v with status; encoding errors become a 500 problem (they would mean
// a NaN reached an answer, which the packages guard against).
//
// The answer is encoded into a pooled buffer (the same bytes json.Marshal and a newline
// made, without Marshal's copy of them and the newline's second one: every launch answer
// is ~1.7 KB, issue 27).
func writeJSON(w http.ResponseWriter, status int, v any) {
	buf := answerBufs.Get().(*bytes.Buffer)
	buf.Reset()
	defer func() {
		if buf.Cap() <= maxPooledAnswer {
			answerBufs.Put(buf)
		}
	}()
	if err := json.NewEncoder(buf).Encode(v); err != nil {
		writeProblem(w, api.NewProblem(api.CodeInternal, "encode answer: %v", err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

// answerBufs are writeJSON's buffers; one that grew past maxPooledAnswer (a long list)
// is left to the collector rather than kept.
var answerBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

const maxPooledAnswer = 64 << 10

// writeProblem writes an RFC 9457 problem document; a busy problem carries Retry-After.
func writeProblem(w http.ResponseWriter, p *api.Problem) {
	if p.Type == "" {
		p.Type = "about:blank"
	}
	if p.Status == 0 {
		p.Status = p.Code.Status()
	}
	if p.Title == "" {
		p.Title = p.Code.Title()
	}
	if p.RetryAfterSeconds > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(p.RetryAfterSeconds))
	}
	b, err := json.Marshal(p)
	if err != nil {
		p.Filesystem, p.Mounts = nil, nil
		b, _ = json.Marshal(p)
	}
	w.Header().Set("Content-Type", api.ProblemContentType)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(p.Status)
	w.Write(append(b, '\n'))
}

// asProblem maps any handler error to a problem document: a *api.Problem passes through,
// anything else is an internal error whose detail says what failed.
func asProblem(err error) *api.Problem {
	var p *api.Problem
	if errors.As(err, &p) {
		return p
	}
	return api.NewProblem(api.CodeInternal, "%v", err)
}

// queryBool is the boolean query parameter name (def when it is absent); anything but
// what strconv.ParseBool takes is a 400 naming the parameter.
func queryBool(r *http.Request, name string, def bool) (bool, error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return def, nil
	}
	v, err := strconv.ParseBool(s)
	if err != nil {
		return false, api.NewProblem(api.CodeBadRequest, "query parameter %q: want true or false, got %q", name, s)
	}
	return v, nil
}

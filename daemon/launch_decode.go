package daemon

import (
	"bytes"
	"io"
	"net/http"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/api"
)

// maxPlainLaunchBody bounds the bodies decodeLaunch tries to read by hand: a runner's
// launch body ({"site":"...","job":"..."}) is tens of bytes.
const maxPlainLaunchBody = 512

// decodeLaunch reads and decodes a launch body as api.DecodeRequest does. The body runners
// send, an object of "site" and "job" strings without escapes, is read by hand
// (plainLaunchBody): api.DecodeRequest's read and json.Unmarshal were ~5 µs of a launch in
// the socket benchmark, against well under 1 µs this way (issue 27). Any other body (other
// fields, escapes, numbers, nulls, repeated or differently cased keys, bad JSON, a body
// of unknown length or longer than maxPlainLaunchBody) goes through api.DecodeRequest
// with the bytes already read put back in front, so its values, warnings and errors are
// api's own (TestPlainLaunchBodyIsDecodeBody).
func decodeLaunch(r *http.Request) (api.LaunchRequest, []string, error) {
	var rest io.Reader = r.Body
	if n := r.ContentLength; n > 0 && n <= maxPlainLaunchBody {
		// Read to the body's end (net/http's says io.EOF with its last bytes), one byte
		// past the declared length at most.
		buf := make([]byte, n+1)
		got := 0
		var err error
		for err == nil && got < len(buf) {
			var k int
			k, err = r.Body.Read(buf[got:])
			got += k
		}
		if err == io.EOF && int64(got) == n {
			if req, ok := plainLaunchBody(buf[:got]); ok {
				return req, nil, nil
			}
		}
		// What was read, then what the body says next (more bytes, its end or its error):
		// what api.DecodeRequest would have read itself.
		var tail io.Reader = r.Body
		if err != nil {
			tail = errReader{err}
		}
		rest = io.MultiReader(bytes.NewReader(buf[:got]), tail)
	}
	var req api.LaunchRequest
	warnings, err := api.DecodeRequest(rest, &req)
	return req, warnings, err
}

// errReader is a reader whose every Read says err.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// plainLaunchBody decodes body when it is a JSON object whose keys are "site" and "job",
// each at most once and spelled exactly so, with string values that hold no escape, no
// control character and only valid UTF-8 (what json.Unmarshal copies unchanged), with JSON
// whitespace around the tokens; ok is false for anything else, and the caller decodes it
// the general way.
func plainLaunchBody(body []byte) (req api.LaunchRequest, ok bool) {
	i := skipJSONSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return api.LaunchRequest{}, false
	}
	i = skipJSONSpace(body, i+1)
	if i < len(body) && body[i] == '}' {
		return req, skipJSONSpace(body, i+1) == len(body)
	}
	var seenSite, seenJob bool
	for {
		key, j, ok := plainJSONString(body, i)
		if !ok {
			return api.LaunchRequest{}, false
		}
		j = skipJSONSpace(body, j)
		if j >= len(body) || body[j] != ':' {
			return api.LaunchRequest{}, false
		}
		val, k, ok := plainJSONString(body, skipJSONSpace(body, j+1))
		if !ok {
			return api.LaunchRequest{}, false
		}
		switch {
		case string(key) == "site" && !seenSite:
			req.Site, seenSite = string(val), true
		case string(key) == "job" && !seenJob:
			req.Job, seenJob = string(val), true
		default:
			return api.LaunchRequest{}, false
		}
		k = skipJSONSpace(body, k)
		switch {
		case k < len(body) && body[k] == ',':
			i = skipJSONSpace(body, k+1)
		case k < len(body) && body[k] == '}':
			return req, skipJSONSpace(body, k+1) == len(body)
		default:
			return api.LaunchRequest{}, false
		}
	}
}

// plainJSONString reads the string token at body[i:] when it holds no escape, no control
// character and only valid UTF-8: its contents and the index after its closing quote.
func plainJSONString(body []byte, i int) (s []byte, next int, ok bool) {
	if i >= len(body) || body[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(body); j++ {
		switch c := body[j]; {
		case c == '"':
			s = body[i+1 : j]
			return s, j + 1, utf8.Valid(s)
		case c == '\\' || c < 0x20:
			return nil, 0, false
		}
	}
	return nil, 0, false
}

// skipJSONSpace is the index of the first byte at or after i that is not JSON whitespace.
func skipJSONSpace(body []byte, i int) int {
	for i < len(body) && (body[i] == ' ' || body[i] == '\t' || body[i] == '\n' || body[i] == '\r') {
		i++
	}
	return i
}

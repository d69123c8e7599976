package config

import (
	"fmt"
	"strconv"
)

// positions maps every key path written in a file ("server.socket", "site[1].max_age",
// "mount[0].links[2].target") to the line it is written on. BurntSushi/toml keeps key
// positions to itself (MetaData has none), so scanPositions finds them.
type positions struct {
	lines map[string]int
}

// line returns the line of the first of keys that is written in the file, or 0.
func (p *positions) line(keys ...string) int {
	if p == nil {
		return 0
	}
	for _, k := range keys {
		if n, ok := p.lines[k]; ok {
			return n
		}
	}
	return 0
}

// scanPositions scans TOML source for keys and table headers. It runs only on text the
// parser accepted, so it need not diagnose anything; it must only never panic or stall
// on any input, and keep track of what changes the meaning of a line: table headers,
// arrays of tables (numbered per parent), dotted keys, quoted keys, inline tables,
// arrays spread over lines, multi-line strings and comments.
func scanPositions(src []byte) *positions {
	s := &scanner{src: src, line: 1, lines: map[string]int{}, arrays: map[string]int{}}
	prefix := ""
	for s.i < len(s.src) {
		start := s.i
		s.skipSpace(true)
		if s.i >= len(s.src) {
			break
		}
		if s.src[s.i] == '[' {
			prefix = s.header()
		} else {
			s.keyValue(prefix)
		}
		s.skipLine()
		if s.i == start {
			s.i++
		}
	}
	return &positions{lines: s.lines}
}

type scanner struct {
	src    []byte
	i      int
	line   int
	lines  map[string]int
	arrays map[string]int // array-of-tables path -> entries seen so far
}

func (s *scanner) peek() byte {
	if s.i < len(s.src) {
		return s.src[s.i]
	}
	return 0
}

func (s *scanner) hasPrefix(p string) bool {
	return len(s.src)-s.i >= len(p) && string(s.src[s.i:s.i+len(p)]) == p
}

// adv moves one byte on, counting lines.
func (s *scanner) adv() {
	if s.src[s.i] == '\n' {
		s.line++
	}
	s.i++
}

func (s *scanner) record(key string, line int) {
	if _, ok := s.lines[key]; !ok {
		s.lines[key] = line
	}
}

// skipSpace skips blanks and comments, and newlines too when newlines is set.
func (s *scanner) skipSpace(newlines bool) {
	for s.i < len(s.src) {
		switch s.src[s.i] {
		case ' ', '\t', '\r':
			s.i++
		case '\n':
			if !newlines {
				return
			}
			s.adv()
		case '#':
			for s.i < len(s.src) && s.src[s.i] != '\n' {
				s.i++
			}
		default:
			return
		}
	}
}

// skipLine skips the rest of the line: a header's closing brackets, a comment.
func (s *scanner) skipLine() {
	for s.i < len(s.src) && s.src[s.i] != '\n' {
		s.i++
	}
	if s.i < len(s.src) {
		s.adv()
	}
}

// header reads "[a.b]" or "[[a.b]]" and returns the path that following keys live in.
// A name that is an array of tables means its latest entry ("[site.x]" after the second
// "[[site]]" is "site[1].x").
func (s *scanner) header() string {
	line := s.line
	s.i++
	aot := s.peek() == '['
	if aot {
		s.i++
	}
	segs := s.keyPath()
	p := ""
	for j, seg := range segs {
		p = join(p, seg)
		s.record(p, line) // a table the header creates implicitly
		if n, ok := s.arrays[p]; ok && !(aot && j == len(segs)-1) {
			p = fmt.Sprintf("%s[%d]", p, n-1)
		}
	}
	if aot {
		n := s.arrays[p]
		s.arrays[p] = n + 1
		s.record(p, line)
		p = fmt.Sprintf("%s[%d]", p, n)
	}
	s.record(p, line)
	return p
}

// keyValue reads "a.b = value" in the table prefix.
func (s *scanner) keyValue(prefix string) {
	line := s.line
	segs := s.keyPath()
	if len(segs) == 0 {
		return
	}
	key := prefix
	for _, seg := range segs {
		key = join(key, seg)
		s.record(key, line)
	}
	s.skipSpace(false)
	if s.peek() != '=' {
		return
	}
	s.i++
	s.skipSpace(false)
	s.value(key)
}

// keyPath reads a dotted key of bare and quoted pieces.
func (s *scanner) keyPath() []string {
	var segs []string
	for {
		s.skipSpace(false)
		seg, ok := s.keyPiece()
		if !ok {
			return segs
		}
		segs = append(segs, seg)
		s.skipSpace(false)
		if s.peek() != '.' {
			return segs
		}
		s.i++
	}
}

func (s *scanner) keyPiece() (string, bool) {
	switch c := s.peek(); {
	case c == '"':
		raw := s.str()
		if u, err := strconv.Unquote(`"` + raw + `"`); err == nil {
			return u, true
		}
		return raw, true
	case c == '\'':
		return s.str(), true
	}
	start := s.i
	for s.i < len(s.src) && isBare(s.src[s.i]) {
		s.i++
	}
	return string(s.src[start:s.i]), s.i > start
}

func isBare(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// value skips one value, recording the positions of array elements and inline-table
// keys under key.
func (s *scanner) value(key string) {
	switch s.peek() {
	case '"', '\'':
		s.str()
	case '[':
		s.array(key)
	case '{':
		s.inlineTable(key)
	default:
		for s.i < len(s.src) {
			switch s.src[s.i] {
			case ',', ']', '}', '#', '\n':
				return
			}
			s.i++
		}
	}
}

func (s *scanner) array(key string) {
	s.i++
	for idx := 0; s.i < len(s.src); {
		start := s.i
		s.skipSpace(true)
		if s.peek() == ']' {
			s.i++
			return
		}
		ek := fmt.Sprintf("%s[%d]", key, idx)
		s.record(ek, s.line)
		s.value(ek)
		s.skipSpace(true)
		if s.peek() == ',' {
			s.i++
			idx++
		}
		if s.i == start {
			s.i++
		}
	}
}

func (s *scanner) inlineTable(key string) {
	s.i++
	for s.i < len(s.src) {
		start := s.i
		s.skipSpace(true)
		if s.peek() == '}' {
			s.i++
			return
		}
		line := s.line
		segs := s.keyPath()
		k := key
		for _, seg := range segs {
			k = join(k, seg)
			s.record(k, line)
		}
		s.skipSpace(false)
		if s.peek() == '=' && len(segs) > 0 {
			s.i++
			s.skipSpace(false)
			s.value(k)
		}
		s.skipSpace(true)
		if s.peek() == ',' {
			s.i++
		}
		if s.i == start {
			s.i++
		}
	}
}

// str skips a basic, literal or multi-line string and returns the raw text of a
// one-line string (what a quoted key needs).
func (s *scanner) str() string {
	q := s.src[s.i]
	if triple := string([]byte{q, q, q}); s.hasPrefix(triple) {
		s.i += 3
		for s.i < len(s.src) && !s.hasPrefix(triple) {
			if q == '"' && s.src[s.i] == '\\' && s.i+1 < len(s.src) {
				s.adv()
			}
			s.adv()
		}
		s.i = min(s.i+3, len(s.src))
		// A closing delimiter may carry up to two quotes of content before it.
		for n := 0; n < 2 && s.peek() == q; n++ {
			s.i++
		}
		return ""
	}
	s.i++
	start := s.i
	for s.i < len(s.src) && s.src[s.i] != q && s.src[s.i] != '\n' {
		if q == '"' && s.src[s.i] == '\\' && s.i+1 < len(s.src) && s.src[s.i+1] != '\n' {
			s.i++
		}
		s.i++
	}
	raw := string(s.src[start:s.i])
	if s.peek() == q {
		s.i++
	}
	return raw
}

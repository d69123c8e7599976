package config

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Problem is one thing wrong with a config file: the key it is about, the line where the
// key (or its table) is written, and what is wrong, including the bad value.
type Problem struct {
	File string // the file's name as given to Parse; "" for a config built in code
	Key  string // full key path, e.g. "site[1].max_age"; "" for a syntax error with no key
	Line int    // 1-based; 0 when the key is not written in the file (it took a default)
	Msg  string
}

// Error renders the problem like a compiler message, so an editor can jump to it:
// "sandboxd.toml:12: site[1].max_age: ...".
func (p Problem) Error() string {
	var b strings.Builder
	if p.File != "" {
		b.WriteString(p.File)
		b.WriteString(":")
	}
	if p.Line > 0 {
		fmt.Fprintf(&b, "%d:", p.Line)
	}
	if b.Len() > 0 {
		b.WriteString(" ")
	}
	if p.Key != "" {
		b.WriteString(p.Key)
		b.WriteString(": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// ValidationError is every problem found in one config, so a person fixes them all in one
// go. Print Problems one per line; Error joins them with newlines.
type ValidationError struct {
	Problems []Problem
}

func (e *ValidationError) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap exposes each problem as an error, as errors.Join would.
func (e *ValidationError) Unwrap() []error {
	errs := make([]error, len(e.Problems))
	for i, p := range e.Problems {
		errs[i] = p
	}
	return errs
}

// problems collects problems while a config is decoded and validated. One key gets one
// problem: a value that failed to decode keeps its default, and a check on that default
// would only add noise.
type problems struct {
	file string
	pos  *positions // nil for a config built in code
	list []Problem
	seen map[string]bool
}

func newProblems(file string, pos *positions) *problems {
	return &problems{file: file, pos: pos, seen: map[string]bool{}}
}

// add records a problem about key, placed on the line of the first of key and alsoAt
// that is written in the file.
func (ps *problems) add(key string, alsoAt []string, format string, args ...any) {
	if key != "" && ps.seen[key] {
		return
	}
	ps.seen[key] = true
	line := 0
	msg := fmt.Sprintf(format, args...)
	if ps.pos != nil {
		line = ps.pos.line(append([]string{key}, alsoAt...)...)
		if line == 0 && key != "" {
			// A check that relates a key of the file to a default the file never
			// mentions; say so, or the person looks for the key in vain.
			msg += " (the value is the embedded default: the file does not set this key)"
		}
	}
	ps.list = append(ps.list, Problem{File: ps.file, Key: key, Line: line, Msg: msg})
}

func (ps *problems) addf(key, format string, args ...any) { ps.add(key, nil, format, args...) }

// err returns the problems in file order (those without a line last), or nil.
func (ps *problems) err() error {
	if len(ps.list) == 0 {
		return nil
	}
	list := slices.Clone(ps.list)
	slices.SortStableFunc(list, func(a, b Problem) int {
		if (a.Line == 0) != (b.Line == 0) {
			if a.Line == 0 {
				return 1
			}
			return -1
		}
		return cmp.Compare(a.Line, b.Line)
	})
	return &ValidationError{Problems: list}
}

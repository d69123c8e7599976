package config

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/sandboxd/sandboxd/internal/suggest"
)

// decode builds the effective config: the embedded default, then data over it key by
// key. Problems of the file are collected in the returned set (with its positions); err
// is non-nil only when the file is not TOML at all, or the embedded default is broken.
func decode(data []byte, name string) (*Config, *problems, error) {
	c := &Config{}
	dps := newProblems("default.toml", nil)
	if err := apply(c, []byte(defaultTOML), dps); err != nil {
		return nil, nil, fmt.Errorf("embedded default config: %w", err)
	}
	if err := dps.err(); err != nil {
		return nil, nil, fmt.Errorf("embedded default config: %w", err)
	}
	ps := newProblems(name, nil)
	if err := apply(c, data, ps); err != nil {
		return nil, nil, err
	}
	return c, ps, nil
}

// apply parses data as TOML and decodes every key in it into c. A syntax error is
// returned as a *ValidationError with the parser's position.
func apply(c *Config, data []byte, ps *problems) error {
	m, err := parseTOML(data)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return &ValidationError{Problems: []Problem{{File: ps.file, Line: pe.Position.Line, Msg: pe.Message}}}
		}
		return &ValidationError{Problems: []Problem{{File: ps.file, Msg: err.Error()}}}
	}
	ps.pos = scanPositions(data)
	d := &decoder{ps: ps}
	d.table("", m, topFields(c))
	return nil
}

// parseTOML parses data into a generic tree. The daemon reloads config on SIGHUP, so a
// panic in the parser must become an error rather than take the daemon down.
func parseTOML(data []byte) (m map[string]any, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("toml parser failed: %v", r)
		}
	}()
	m = map[string]any{}
	if _, err := toml.Decode(string(data), &m); err != nil {
		return nil, err
	}
	return m, nil
}

// decoder walks a parsed TOML tree against the schema of schema.go.
type decoder struct {
	ps *problems
}

// setter stores the value v of key (its full path) or says why it cannot.
type setter func(d *decoder, key string, v any) error

// field is one key of a table and how to decode it.
type field struct {
	name string
	set  setter
}

// table decodes every key of m; a key that is not in fields is an unknown-key problem.
// Keys missing from m keep the value they already have, which is how the file overrides
// the default key by key.
func (d *decoder) table(prefix string, m map[string]any, fields []field) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		key := join(prefix, k)
		i := slices.IndexFunc(fields, func(f field) bool { return f.name == k })
		if i < 0 {
			d.ps.addf(key, "unknown key %s%s", quoteKey(k), didYouMean(k, fields))
			continue
		}
		if err := fields[i].set(d, key, m[k]); err != nil {
			d.ps.addf(key, "%v (got %s)", err, show(m[k]))
		}
	}
}

// didYouMean names the known key closest to a misspelt one, if one is close.
func didYouMean(k string, fields []field) string {
	best, bestDist := "", 3
	for _, f := range fields {
		if d := suggest.Distance(k, f.name); d < bestDist {
			best, bestDist = f.name, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

func join(prefix, k string) string {
	if prefix == "" {
		return k
	}
	return prefix + "." + k
}

// quoteKey shows a key as it would be written, quoting keys that are not bare.
func quoteKey(k string) string {
	if k != "" && strings.Trim(k, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") == "" {
		return strconv.Quote(k)
	}
	return strconv.Quote(strconv.Quote(k))
}

// show renders a value for a message, shortened.
func show(v any) string {
	var s string
	switch x := v.(type) {
	case string:
		s = strconv.Quote(x)
	case map[string]any:
		s = "a table"
	case []map[string]any:
		s = "an array of tables"
	default:
		s = fmt.Sprintf("%v", x)
	}
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return s
}

func subTable(fields func() []field) setter {
	return func(d *decoder, key string, v any) error {
		m, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("want a table [%s]", key)
		}
		d.table(key, m, fields())
		return nil
	}
}

// entries decodes an array of tables. The file's list replaces the current one; each
// entry starts from newEntry (the documented per-entry defaults) and must set the
// identity keys.
func entries[T any](p *[]T, newEntry func() T, fields func(*T) []field, identity ...string) setter {
	return func(d *decoder, key string, v any) error {
		var list []map[string]any
		switch x := v.(type) {
		case []map[string]any:
			list = x
		case []any:
			for i, e := range x {
				m, ok := e.(map[string]any)
				if !ok {
					return fmt.Errorf("entry %d is not a table: want [[%s]] tables", i, key)
				}
				list = append(list, m)
			}
		default:
			return fmt.Errorf("want an array of tables [[%s]]", key)
		}
		var out []T
		for i, m := range list {
			ekey := fmt.Sprintf("%s[%d]", key, i)
			e := newEntry()
			d.table(ekey, m, fields(&e))
			for _, id := range identity {
				if _, ok := m[id]; !ok {
					d.ps.add(ekey+"."+id, []string{ekey}, "required in every %s entry", key)
				}
			}
			out = append(out, e)
		}
		*p = out
		return nil
	}
}

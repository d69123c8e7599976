package config

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/units"
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
			d.ps.addf(key, "unknown key %s%s", quoteKey(k), suggest(k, fields))
			continue
		}
		if err := fields[i].set(d, key, m[k]); err != nil {
			d.ps.addf(key, "%v (got %s)", err, show(m[k]))
		}
	}
}

// suggest names the known key closest to a misspelt one, if one is close.
func suggest(k string, fields []field) string {
	best, bestDist := "", 3
	for _, f := range fields {
		if d := editDistance(k, f.name); d < bestDist {
			best, bestDist = f.name, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// editDistance is the Levenshtein distance between two short strings.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
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

func str(p *string) setter {
	return func(_ *decoder, _ string, v any) error {
		s, ok := v.(string)
		if !ok {
			return errors.New("want a string")
		}
		*p = s
		return nil
	}
}

// pathStr stores a path, cleaned when absolute so that containment checks and the
// daemon see one spelling. Relative paths are kept as written for validation to name.
func pathStr(p *string) setter {
	return func(_ *decoder, _ string, v any) error {
		s, ok := v.(string)
		if !ok {
			return errors.New("want a path string")
		}
		if path.IsAbs(s) {
			s = path.Clean(s)
		}
		*p = s
		return nil
	}
}

func strList(p *[]string) setter {
	return func(_ *decoder, _ string, v any) error {
		a, ok := v.([]any)
		if !ok {
			return errors.New("want an array of strings")
		}
		var out []string
		for i, e := range a {
			s, ok := e.(string)
			if !ok {
				return fmt.Errorf("element %d is not a string: want an array of strings", i)
			}
			out = append(out, s)
		}
		*p = out
		return nil
	}
}

// pathList stores a list of paths, each cleaned when absolute (see pathStr).
func pathList(p *[]string) setter {
	return func(d *decoder, key string, v any) error {
		var list []string
		if err := strList(&list)(d, key, v); err != nil {
			return err
		}
		for i, s := range list {
			if path.IsAbs(s) {
				list[i] = path.Clean(s)
			}
		}
		*p = list
		return nil
	}
}

func boolean(p *bool) setter {
	return func(_ *decoder, _ string, v any) error {
		b, ok := v.(bool)
		if !ok {
			return errors.New("want true or false")
		}
		*p = b
		return nil
	}
}

func integer(p *int64) setter {
	return func(_ *decoder, _ string, v any) error {
		n, ok := v.(int64)
		if !ok {
			return errors.New("want an integer")
		}
		*p = n
		return nil
	}
}

func count(p *uint64) setter {
	return func(_ *decoder, _ string, v any) error {
		n, ok := v.(int64)
		if !ok {
			return errors.New("want an integer")
		}
		if n < 0 {
			return errors.New("must not be negative")
		}
		*p = uint64(n)
		return nil
	}
}

func float(p *float64) setter {
	return func(_ *decoder, _ string, v any) error {
		switch x := v.(type) {
		case float64:
			*p = x
		case int64:
			*p = float64(x)
		default:
			return errors.New("want a number")
		}
		return nil
	}
}

func duration(p *time.Duration) setter {
	return func(_ *decoder, _ string, v any) error {
		s, ok := v.(string)
		if !ok {
			return errors.New(`want a duration string such as "2s" or "1m30s"`)
		}
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil {
			return errors.New(`want a duration such as "2s" or "1m30s"`)
		}
		if d < 0 {
			return errors.New("must not be negative")
		}
		*p = d
		return nil
	}
}

func size(p *api.Size) setter {
	return func(_ *decoder, _ string, v any) error {
		switch x := v.(type) {
		case int64:
			if x < 0 {
				return errors.New("must not be negative")
			}
			*p = api.Size(x)
		case string:
			n, err := api.ParseSize(x)
			if err != nil {
				return stripQuoted(err, x)
			}
			*p = n
		default:
			return errors.New(`want a size such as "512MiB" or an integer of bytes`)
		}
		return nil
	}
}

// bytesThreshold decodes a size ("1.5GiB", 1073741824) or a percent ("5%").
func bytesThreshold(p *units.Threshold) setter {
	return func(_ *decoder, _ string, v any) error {
		switch x := v.(type) {
		case int64:
			if x < 0 {
				return errors.New("must not be negative")
			}
			*p = units.Threshold{Amount: uint64(x)}
		case string:
			t, err := units.ParseBytesThreshold(x)
			if err != nil {
				return stripQuoted(err, x)
			}
			*p = t
		default:
			return errors.New(`want a size such as "1.5GiB" or a percent such as "5%"`)
		}
		return nil
	}
}

// countThreshold decodes an inode count (50000 or "50000") or a percent ("5%").
func countThreshold(p *units.Threshold) setter {
	return func(_ *decoder, _ string, v any) error {
		switch x := v.(type) {
		case int64:
			if x < 0 {
				return errors.New("must not be negative")
			}
			*p = units.Threshold{Amount: uint64(x)}
		case string:
			t, err := units.ParseCountThreshold(x)
			if err != nil {
				return stripQuoted(err, x)
			}
			*p = t
		default:
			return errors.New(`want a count such as 50000 or a percent such as "5%"`)
		}
		return nil
	}
}

// fileMode decodes an octal permission string such as "0660".
func fileMode(p *os.FileMode) setter {
	return func(_ *decoder, _ string, v any) error {
		s, ok := v.(string)
		if !ok {
			return errors.New(`want an octal string such as "0660"`)
		}
		t := strings.TrimPrefix(strings.TrimPrefix(s, "0o"), "0O")
		n, err := strconv.ParseUint(t, 8, 32)
		if err != nil || t == "" {
			return errors.New(`want an octal string such as "0660"`)
		}
		if n > 0o777 {
			return errors.New("want permission bits only, at most 0777")
		}
		*p = os.FileMode(n)
		return nil
	}
}

// stripQuoted drops the value from a parser's message when it starts with it, since
// the problem shows the value itself.
func stripQuoted(err error, s string) error {
	msg := strings.TrimPrefix(err.Error(), strconv.Quote(s)+": ")
	msg = strings.TrimPrefix(msg, "size "+strconv.Quote(s)+": ")
	if msg == "size "+strconv.Quote(s)+" is negative" {
		msg = "must not be negative"
	}
	return errors.New(msg)
}

// finite reports whether f is a real number; TOML allows nan and inf.
func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

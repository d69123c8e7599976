package config

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/units"
)

// Setters of scalar values and lists: each checks the TOML type, parses the value into
// its Go type and says what it wanted when it cannot.

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

// uidList stores a list of numeric uids (0 to 4294967294).
func uidList(p *[]uint32) setter {
	return func(_ *decoder, _ string, v any) error {
		a, ok := v.([]any)
		if !ok {
			return errors.New("want an array of numeric uids")
		}
		var out []uint32
		for i, e := range a {
			n, ok := e.(int64)
			if !ok || n < 0 || n >= 1<<32-1 {
				return fmt.Errorf("element %d is not a uid: want an array of integers from 0 to 4294967294", i)
			}
			out = append(out, uint32(n))
		}
		*p = out
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

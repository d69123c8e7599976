package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Size is a byte count that decodes from an integer or a size string ("1.5GiB", "512MiB",
// "10MB", "0"). Binary suffixes (KiB, MiB, GiB, TiB) are powers of 1024; decimal ones
// (kB, MB, GB, TB) powers of 1000; "B" or no suffix is bytes.
type Size int64

var sizeUnits = []struct {
	suffix string
	mult   float64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40}, {"pib", 1 << 50},
	{"ki", 1 << 10}, {"mi", 1 << 20}, {"gi", 1 << 30}, {"ti", 1 << 40},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12}, {"pb", 1e15},
	{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"t", 1 << 40},
	{"b", 1},
}

// ParseSize parses a size string. Negative sizes, NaN, and values past 2^63 are errors.
func ParseSize(s string) (Size, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, errors.New("empty size")
	}
	lower := strings.ToLower(t)
	mult := 1.0
	num := lower
	for _, u := range sizeUnits {
		if strings.HasSuffix(lower, u.suffix) {
			mult = u.mult
			num = strings.TrimSpace(strings.TrimSuffix(lower, u.suffix))
			break
		}
	}
	if num == "" || strings.ContainsAny(num, "xXpP_") {
		return 0, fmt.Errorf("size %q: want a number of bytes or a number with a unit such as 512MiB or 1.5GiB", s)
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("size %q: want a number of bytes or a number with a unit such as 512MiB or 1.5GiB", s)
	}
	if f < 0 {
		return 0, fmt.Errorf("size %q is negative", s)
	}
	v := f * mult
	if v >= math.MaxInt64 {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return Size(v), nil
}

// FormatSize renders bytes for a person: "0 B", "812 B", "11.0 GiB".
func FormatSize(b uint64) string {
	var buf [24]byte
	return string(AppendSize(buf[:0], b))
}

// AppendSize appends FormatSize(b) to dst. FormatSize and FormatCount are on every
// launch answer's path (its detail line): strconv, not fmt, writes them (issue 27).
func AppendSize(dst []byte, b uint64) []byte {
	const unit = 1024
	if b < unit {
		return append(strconv.AppendUint(dst, b, 10), " B"...)
	}
	div, exp := uint64(unit), 0
	for n := b / unit; n >= unit && exp < 5; n /= unit {
		div *= unit
		exp++
	}
	dst = strconv.AppendFloat(dst, float64(b)/float64(div), 'f', 1, 64) // as fmt's %.1f
	return append(dst, ' ', "KMGTPE"[exp], 'i', 'B')
}

// FormatCount renders a count for a person with thousands separators: "720,896".
func FormatCount(n uint64) string {
	var buf [32]byte
	return string(AppendCount(buf[:0], n))
}

// AppendCount appends FormatCount(n) to dst.
func AppendCount(dst []byte, n uint64) []byte {
	var digits [20]byte
	d := strconv.AppendUint(digits[:0], n, 10)
	for i, c := range d {
		if i > 0 && (len(d)-i)%3 == 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, c)
	}
	return dst
}

// String renders the size for a person.
func (s Size) String() string {
	if s < 0 {
		return "-" + FormatSize(uint64(-s))
	}
	return FormatSize(uint64(s))
}

// UnmarshalJSON accepts an integer number of bytes or a size string.
func (s *Size) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var str string
		if err := json.Unmarshal(b, &str); err != nil {
			return err
		}
		v, err := ParseSize(str)
		if err != nil {
			return err
		}
		*s = v
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("want an integer of bytes or a size string, got %s", truncate(string(b), 40))
	}
	i, err := strconv.ParseInt(n.String(), 10, 64)
	if err != nil {
		return fmt.Errorf("want an integer of bytes, got %s", truncate(n.String(), 40))
	}
	if i < 0 {
		return fmt.Errorf("size %d is negative", i)
	}
	*s = Size(i)
	return nil
}

// UnmarshalText lets TOML and flags decode sizes as strings.
func (s *Size) UnmarshalText(b []byte) error {
	v, err := ParseSize(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// MarshalText encodes the size as bytes, which ParseSize reads back.
func (s Size) MarshalText() ([]byte, error) { return []byte(strconv.FormatInt(int64(s), 10)), nil }

// MarshalJSON encodes the size as an integer of bytes.
func (s Size) MarshalJSON() ([]byte, error) { return []byte(strconv.FormatInt(int64(s), 10)), nil }

// Duration is a time.Duration that decodes from a Go duration string ("2s") or an integer
// of nanoseconds, and encodes as a duration string.
type Duration time.Duration

// UnmarshalJSON accepts "2s" or an integer of nanoseconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var str string
		if err := json.Unmarshal(b, &str); err != nil {
			return err
		}
		return d.UnmarshalText([]byte(str))
	}
	var n int64
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("want a duration string such as \"2s\", got %s", truncate(string(b), 40))
	}
	if n < 0 {
		return fmt.Errorf("duration %d is negative", n)
	}
	*d = Duration(n)
	return nil
}

// UnmarshalText parses a Go duration string; negative durations are errors.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(strings.TrimSpace(string(b)))
	if err != nil {
		return fmt.Errorf("want a duration such as \"2s\" or \"1m30s\": %w", err)
	}
	if v < 0 {
		return fmt.Errorf("duration %q is negative", string(b))
	}
	*d = Duration(v)
	return nil
}

// MarshalText encodes the duration as a Go duration string.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// D returns the time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

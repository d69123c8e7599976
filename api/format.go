package api

import (
	"math"
	"strings"
	"time"
)

// FormatDuration renders a duration for a person in the one style every message and
// the CLI use: Go's duration syntax, trimmed and rounded to what a person reads —
// "1.5s", "45s", "4m10s", "10m", "2h57m", "36h". Under a second it keeps milliseconds ("250ms").
func FormatDuration(d time.Duration) string {
	if d < 0 {
		return "-" + FormatDuration(-d)
	}
	switch {
	case d == 0:
		return "0s"
	case d < time.Millisecond:
		// as is ("1ns", "250µs"): rounding would read "0s", which it is not
	case d < time.Second:
		d = d.Round(time.Millisecond)
	case d < 10*time.Second:
		d = d.Round(100 * time.Millisecond) // a configured 1.5s stays 1.5s
	case d < time.Hour:
		d = d.Round(time.Second)
	default:
		d = d.Round(time.Minute)
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// FormatSeconds is FormatDuration of a seconds field (an age, a prediction); a NaN,
// negative or absurd value reads "unknown" rather than a made-up figure.
func FormatSeconds(s float64) string {
	if math.IsNaN(s) || s < 0 || s > float64(math.MaxInt64)/1e9 {
		return "unknown"
	}
	return FormatDuration(time.Duration(s * float64(time.Second)))
}

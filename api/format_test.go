package api

import (
	"math"
	"testing"
	"time"
)

func TestFormatDuration(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{time.Nanosecond, "1ns"},
		{250 * time.Millisecond, "250ms"},
		{1500 * time.Millisecond, "1.5s"},
		{1234 * time.Millisecond, "1.2s"},
		{45 * time.Second, "45s"},
		{4*time.Minute + 10*time.Second, "4m10s"},
		{10 * time.Minute, "10m"},
		{2*time.Hour + 57*time.Minute + 20*time.Second, "2h57m"},
		{36 * time.Hour, "36h"},
		{-90 * time.Second, "-1m30s"},
	} {
		if got := FormatDuration(c.d); got != c.want {
			t.Errorf("FormatDuration(%v) = %q, want %q", c.d, got, c.want)
		}
	}
	for _, c := range []struct {
		s    float64
		want string
	}{{11520, "3h12m"}, {0.5, "500ms"}, {math.NaN(), "unknown"}, {-1, "unknown"}, {math.Inf(1), "unknown"}} {
		if got := FormatSeconds(c.s); got != c.want {
			t.Errorf("FormatSeconds(%v) = %q, want %q", c.s, got, c.want)
		}
	}
}

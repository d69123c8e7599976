// Package units holds the value types that config and the policy packages share: a
// threshold given as an absolute amount or as a percent of a filesystem's capacity.
package units

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/sandboxd/sandboxd/api"
)

// Threshold is an amount given either absolutely (bytes or inodes) or as a percent of the
// filesystem's total. The zero value is "0", which never triggers.
type Threshold struct {
	Amount  uint64  // absolute amount, when Percent is false
	Pct     float64 // 0..100, when Percent is true
	Percent bool
}

// ParseBytesThreshold parses "1.5GiB", "512MiB", "0", an integer string, or "5%".
func ParseBytesThreshold(s string) (Threshold, error) {
	if p, ok, err := parsePercent(s); ok || err != nil {
		return p, err
	}
	v, err := api.ParseSize(s)
	if err != nil {
		return Threshold{}, err
	}
	return Threshold{Amount: uint64(v)}, nil
}

// ParseCountThreshold parses an inode count ("50000") or a percent ("5%").
func ParseCountThreshold(s string) (Threshold, error) {
	if p, ok, err := parsePercent(s); ok || err != nil {
		return p, err
	}
	n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return Threshold{}, fmt.Errorf("%q: want a count such as 50000 or a percent such as \"5%%\"", s)
	}
	return Threshold{Amount: n}, nil
}

func parsePercent(s string) (Threshold, bool, error) {
	t := strings.TrimSpace(s)
	if !strings.HasSuffix(t, "%") {
		return Threshold{}, false, nil
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(t, "%")), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return Threshold{}, true, fmt.Errorf("%q: want a percent such as \"5%%\"", s)
	}
	if f < 0 || f > 100 {
		return Threshold{}, true, fmt.Errorf("%q: a percent must be between 0%% and 100%%", s)
	}
	return Threshold{Pct: f, Percent: true}, true, nil
}

// Resolve turns the threshold into an absolute amount for a filesystem of total units.
func (t Threshold) Resolve(total uint64) uint64 {
	if !t.Percent {
		return t.Amount
	}
	return uint64(float64(total) * t.Pct / 100)
}

// String renders the threshold as it is written in config.
func (t Threshold) String() string {
	if t.Percent {
		return strconv.FormatFloat(t.Pct, 'f', -1, 64) + "%"
	}
	return strconv.FormatUint(t.Amount, 10)
}

// BytesString renders a byte threshold for a person ("1.5 GiB" or "5%").
func (t Threshold) BytesString() string {
	if t.Percent {
		return t.String()
	}
	return api.FormatSize(t.Amount)
}

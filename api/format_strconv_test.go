package api

import (
	"fmt"
	"math"
	"math/rand"
	"strconv"
	"testing"
)

// The fmt-based formatters FormatSize, FormatCount and Fingerprint were before they were
// rewritten with strconv (issue 27: they are on every launch answer's path). The
// rewrites must say exactly what these said, byte for byte.
func fmtFormatSize(b uint64) string {
	const unit = 1024
	if b < unit {
		return fmt.Sprintf("%d B", b)
	}
	div, exp := uint64(unit), 0
	for n := b / unit; n >= unit && exp < 5; n /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(b)/float64(div), "KMGTPE"[exp])
}

func fmtFormatCount(n uint64) string {
	s := strconv.FormatUint(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func fmtFingerprint(fs Filesystem) string {
	name := fs.Path
	if fs.Mountpoint != "" && fs.Mountpoint != fs.Path {
		name = fmt.Sprintf("%s (on %s, %s)", fs.Path, fs.Mountpoint, fs.FSType)
	}
	s := fmt.Sprintf("%s has %s free of %s (%.0f%% used)", name, fmtFormatSize(fs.AvailBytes),
		fmtFormatSize(fs.SizeBytes), fs.Used()*100)
	if fs.Files > 0 {
		s += fmt.Sprintf(" and %s of %s inodes free", fmtFormatCount(fs.FilesFree), fmtFormatCount(fs.Files))
	} else {
		s += " and no inode limit"
	}
	if fs.Stale {
		s += " (figures are stale: statfs is not answering)"
	}
	return s + fs.ReleasedClause() + SizedBy(fs.SizeSetting)
}

// interesting are values at the edges of every unit and rounding step, and random ones.
func interesting(r *rand.Rand) []uint64 {
	out := []uint64{0, 1, 9, 10, 999, 1000, 1001, 1023, 1024, 1025, 1<<20 - 1, 1 << 20, 1<<20 + 1,
		1<<30 - 52, 1<<30 - 51, 1<<30 - 1, 1 << 30, 8 << 30, 1<<40 - 1, 1 << 50, 1 << 60, 1<<60 + 1<<59,
		1023 << 50, 15 << 60, math.MaxInt64, math.MaxUint64 - 1, math.MaxUint64, 999_999, 1_000_000, 12_345_678_901}
	for range 5000 {
		out = append(out, r.Uint64()>>r.Intn(64))
	}
	// x.x5 boundaries of %.1f at every unit: rounding must be strconv's, as fmt's was
	for exp := uint(10); exp <= 60; exp += 10 {
		for _, f := range []float64{0.05, 0.25, 0.35, 0.45, 0.95, 1.05, 9.95, 99.95, 1023.95} {
			v := f * float64(uint64(1)<<exp)
			out = append(out, uint64(v), uint64(v)+1, uint64(v)-1)
		}
	}
	return out
}

func TestFormatSizeAndCountSayWhatFmtSaid(t *testing.T) {
	r := rand.New(rand.NewSource(27))
	for _, n := range interesting(r) {
		if got, want := FormatSize(n), fmtFormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q, fmt said %q", n, got, want)
		}
		if got, want := FormatCount(n), fmtFormatCount(n); got != want {
			t.Errorf("FormatCount(%d) = %q, fmt said %q", n, got, want)
		}
		if got, want := string(AppendSize([]byte("x"), n)), "x"+fmtFormatSize(n); got != want {
			t.Errorf("AppendSize(x, %d) = %q, want %q", n, got, want)
		}
	}
}

func TestFingerprintSaysWhatFmtSaid(t *testing.T) {
	r := rand.New(rand.NewSource(1206))
	vals := interesting(r)
	pick := func() uint64 { return vals[r.Intn(len(vals))] }
	ratios := []float64{0, math.Copysign(0, -1), 0.004999, 0.005, 0.0051, 0.5, 0.995, 0.9951, 1, 1.5, -0.2, math.NaN(), math.Inf(1), math.Inf(-1)}
	for i := range 20000 {
		fs := Filesystem{Path: "/var/lib/sandboxd", SizeBytes: pick(), FreeBytes: pick(), AvailBytes: pick()}
		if i%3 != 0 {
			fs.Files, fs.FilesFree = pick(), pick()
		}
		switch i % 4 {
		case 1:
			fs.Mountpoint, fs.FSType = "/var", "ext4"
		case 2:
			fs.Mountpoint, fs.FSType = fs.Path, "tmpfs"
		case 3:
			fs.Mountpoint, fs.FSType = "/", ""
		}
		if i%5 == 0 {
			fs.UsedRatio = ratios[r.Intn(len(ratios))]
		} else if i%5 == 1 {
			fs.UsedRatio = r.Float64()
		}
		fs.Stale = i%7 == 0
		if i%11 == 0 {
			fs.ReserveReleasedBytes = pick()
		}
		if i%13 == 0 {
			fs.SizeSetting = "[openshell.drivers.vm] overlay_disk_mib"
		}
		if got, want := fs.Fingerprint(), fmtFingerprint(fs); got != want {
			t.Fatalf("Fingerprint of %+v\n = %q\nfmt said %q", fs, got, want)
		}
	}
}

func BenchmarkFingerprint(b *testing.B) {
	fs := Filesystem{Path: "/var/lib/sandboxd/site", Mountpoint: "/var", FSType: "ext4", SizeBytes: 8 << 30,
		AvailBytes: 7 << 30, FreeBytes: 7 << 30, Files: 3085473, FilesFree: 3069089}
	b.ReportAllocs()
	for b.Loop() {
		_ = fs.Fingerprint()
	}
}

package api

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand"
	"reflect"
	"strings"
	"testing"
	"time"
)

// filler sets every field of a value, at every depth, to a random value drawn from the
// cases encoding/json treats specially (escapes, invalid UTF-8, float formats, zones,
// nil and empty), so a field AppendJSON leaves out or writes differently shows.
type filler struct{ r *rand.Rand }

var trickyStrings = []string{"", "a", "bench", "/var/lib/sandboxd/site", `q"uote\back`, "<html>&amp;", "tab\tnl\ncr\r",
	"\b\f\x00\x01\x1f\x7f", "caf\u00e9 \u65e5\u672c", "\u2028\u2029", "bad\xffutf8\xc3", "\xed\xa0\x80", "emoji \U0001F600",
	"site bench holds 16,381 files; pruned 0 files (0 B) in this call"}

var trickyFloats = []float64{0, math.Copysign(0, -1), 1, -1, 0.5, 6.795894433, 43200, 1e-6, 9.99999e-7, 1e-7, 1.5e-9,
	1e20, 1e21, 9.999999999e20, 123456789.123456789, math.MaxFloat64, math.SmallestNonzeroFloat64, -3.25e-12, 0.006695270538330078}

func (f filler) fill(v reflect.Value, depth int) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(trickyStrings[f.r.Intn(len(trickyStrings))])
	case reflect.Bool:
		v.SetBool(f.r.Intn(2) == 0)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		switch f.r.Intn(4) {
		case 0:
			v.SetInt(0)
		case 1:
			v.SetInt(math.MinInt64 >> (64 - v.Type().Bits()))
		default:
			v.SetInt(f.r.Int63() >> (64 - v.Type().Bits()) * int64(1-2*f.r.Intn(2)))
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		switch f.r.Intn(4) {
		case 0:
			v.SetUint(0)
		case 1:
			v.SetUint(math.MaxUint64 >> (64 - v.Type().Bits()))
		default:
			v.SetUint(f.r.Uint64() >> (64 - v.Type().Bits()))
		}
	case reflect.Float32, reflect.Float64:
		if f.r.Intn(3) == 0 {
			v.SetFloat(f.r.NormFloat64() * math.Pow(10, float64(f.r.Intn(50)-25)))
		} else {
			v.SetFloat(trickyFloats[f.r.Intn(len(trickyFloats))])
		}
	case reflect.Pointer:
		if f.r.Intn(4) == 0 || depth > 4 {
			v.SetZero()
			return
		}
		p := reflect.New(v.Type().Elem())
		f.fill(p.Elem(), depth+1)
		v.Set(p)
	case reflect.Slice:
		switch n := f.r.Intn(5); {
		case n == 0 || depth > 4:
			v.SetZero()
		default:
			s := reflect.MakeSlice(v.Type(), n-1, n-1)
			for i := range n - 1 {
				f.fill(s.Index(i), depth+1)
			}
			v.Set(s)
		}
	case reflect.Map, reflect.Interface:
		v.SetZero()
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			zones := []*time.Location{time.UTC, time.Local, time.FixedZone("x", 5*3600+30*60), time.FixedZone("y", -7*3600)}
			t := time.Unix(f.r.Int63n(253402300799), f.r.Int63n(1e9)*int64(f.r.Intn(2))).In(zones[f.r.Intn(len(zones))])
			if f.r.Intn(40) == 0 {
				t = time.Date(10000+f.r.Intn(5), 1, 1, 0, 0, 0, 0, time.UTC) // Marshal refuses it
			}
			if f.r.Intn(10) == 0 {
				t = time.Time{}
			}
			v.Set(reflect.ValueOf(t))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				f.fill(v.Field(i), depth+1)
			}
		}
	}
}

// TestAppendJSONIsMarshal: the hand encoding of launch answers (and of the site and
// filesystem objects in them) is json.Marshal's, byte for byte, or says it cannot be
// when Marshal fails.
func TestAppendJSONIsMarshal(t *testing.T) {
	f := filler{rand.New(rand.NewSource(27))}
	var compared, refused int
	for i := range 30000 {
		var r LaunchResponse
		f.fill(reflect.ValueOf(&r).Elem(), 0)
		if i%5 == 0 {
			r.Mounts = r.Mounts[:0:0] // empty, not nil: the common answer
		}
		want, werr := json.Marshal(&r)
		got, ok := r.AppendJSON([]byte("prefix"))
		if werr != nil {
			if ok {
				t.Fatalf("Marshal failed (%v) but AppendJSON did not: %s", werr, got)
			}
			refused++
			continue
		}
		if !ok {
			t.Fatalf("AppendJSON refused what Marshal encodes: %s", want)
		}
		if !bytes.Equal(got, append([]byte("prefix"), want...)) {
			t.Fatalf("AppendJSON differs from Marshal:\n got %s\nwant prefix%s", got, want)
		}
		compared++
		if r.Site != nil {
			sw, _ := json.Marshal(r.Site)
			if sg, ok := r.Site.AppendJSON(nil); !ok || !bytes.Equal(sg, sw) {
				t.Fatalf("Site.AppendJSON = %s, Marshal %s", sg, sw)
			}
		}
	}
	if compared < 20000 || refused == 0 {
		t.Fatalf("compared %d answers, %d refused: the filler does not reach both cases", compared, refused)
	}
}

// Every field of the types AppendJSON writes is in its output once set: a field added
// to LaunchResponse, Site or Filesystem without a line in appendjson.go fails here (and
// in TestAppendJSONIsMarshal) rather than going missing from launch answers.
func TestAppendJSONNamesEveryField(t *testing.T) {
	s, fs := "x", 0.5
	now := time.Now()
	r := LaunchResponse{OK: true, Pruned: 1, PrunedJobs: []string{s}, FreedBytes: 1, Mounts: []Mount{{Name: s}}, Advice: &s,
		Verdict: s, Detail: s, Warnings: []string{s},
		Site: &Site{Name: s, Path: s, Files: 1, Bytes: 1, Jobs: 1, RunningJobs: 1, OldestAgeSeconds: fs, MaxAgeSeconds: fs,
			PendingPrune: 1, PrunedTotal: 1, LastPruneAt: &now, Problem: &s},
		Filesystem: &Filesystem{Path: s, Mountpoint: s, Device: s, Devno: s, FSType: s, SizeBytes: 1, AvailBytes: 1, FreeBytes: 1,
			UsedRatio: fs, Files: 1, FilesFree: 1, GrowthBytesPerSecond: fs, PredictedFullSeconds: &fs, ReclaimThresholdBytes: 1,
			ReclaimThresholdWhy: s, ReplaceThresholdBytes: 1, ReclaimThresholdFiles: 1, ReplaceThresholdFiles: 1, ReserveBytes: 1,
			ReserveReleasedBytes: 1, Verdict: s, ReplaceMark: s, SizeSetting: s, Stale: true, Error: s, Errno: s, ErrorSince: &now,
			SampledAt: now, GrowthWindow: 1}}
	// Every field set, at every depth (a new field is zero here, and fails below).
	for _, v := range []reflect.Value{reflect.ValueOf(r), reflect.ValueOf(*r.Site), reflect.ValueOf(*r.Filesystem)} {
		for i := range v.NumField() {
			if v.Field(i).IsZero() {
				t.Errorf("%s.%s is not set in this test: set it, and write it in appendjson.go", v.Type().Name(), v.Type().Field(i).Name)
			}
		}
	}
	got, ok := r.AppendJSON(nil)
	want, _ := json.Marshal(r)
	if !ok || !bytes.Equal(got, want) {
		t.Fatalf("AppendJSON = %s (ok %v)\nMarshal    %s", got, ok, want)
	}
	for _, typ := range []reflect.Type{reflect.TypeOf(r), reflect.TypeOf(*r.Site), reflect.TypeOf(*r.Filesystem)} {
		for i := range typ.NumField() {
			name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			if !bytes.Contains(got, []byte(`"`+name+`":`)) {
				t.Errorf("%s.%s (%q): not in %s", typ.Name(), typ.Field(i).Name, name, got)
			}
		}
	}
}

func BenchmarkLaunchAnswerEncoding(b *testing.B) {
	r := sampleLaunchResponse()
	b.Run("marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			json.Marshal(r)
		}
	})
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 4096)
		for b.Loop() {
			buf, _ = r.AppendJSON(buf[:0])
		}
	})
}

func sampleLaunchResponse() *LaunchResponse {
	now := time.Now()
	return &LaunchResponse{OK: true, PrunedJobs: []string{}, Mounts: []Mount{}, Verdict: "ok",
		Site: &Site{Name: "bench", Path: "/tmp/sandboxd-bench-status.abcdef/fs/launch/site", Files: 16381, Bytes: 57511936,
			Jobs: 2341, OldestAgeSeconds: 6.795894433, MaxAgeSeconds: 43200},
		Filesystem: &Filesystem{Path: "/tmp/sandboxd-bench-status.abcdef/fs/launch", Mountpoint: "/tmp/sandboxd-bench-status.abcdef/fs",
			Device: "sandboxd-bench-status", Devno: "0:40", FSType: "tmpfs", SizeBytes: 8589934592, AvailBytes: 8532422656,
			FreeBytes: 8532422656, UsedRatio: 0.006695270538330078, Files: 3085473, FilesFree: 3069089,
			ReclaimThresholdBytes: 1610612736, ReclaimThresholdWhy: "reclaim_below 1.5 GiB", ReplaceThresholdBytes: 268435456,
			ReclaimThresholdFiles: 154273, ReplaceThresholdFiles: 30854, Verdict: "ok", SampledAt: now},
		Detail: "/tmp/sandboxd-bench-status.abcdef/fs/launch (on /tmp/sandboxd-bench-status.abcdef/fs, tmpfs) has 7.9 GiB free of 8.0 GiB (1% used) and 3,069,089 of 3,085,473 inodes free; verdict ok; site bench holds 16,381 files; pruned 0 files (0 B) in this call"}
}

package backtest

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Point is one sample of a series.
type Point struct {
	Time time.Time
	Sample
}

// Series is a filesystem's recorded samples, oldest first.
type Series struct {
	Name   string
	Points []Point
}

// MaxPoints bounds a series (30 days of 1 s samples, with room).
const MaxPoints = 4 << 20

// Interval is the median spacing of the series' samples (0 with fewer than two).
func (s Series) Interval() time.Duration {
	if len(s.Points) < 2 {
		return 0
	}
	d := make([]time.Duration, 0, len(s.Points)-1)
	for i := 1; i < len(s.Points); i++ {
		d = append(d, s.Points[i].Time.Sub(s.Points[i-1].Time))
	}
	slices.Sort(d)
	return d[len(d)/2]
}

// ReadSeries reads a series: CSV with a header line naming the columns time, avail_bytes
// and size_bytes, and optionally files_free and files (time in Unix seconds, fractions
// allowed, or RFC 3339; blank lines and lines starting with # are skipped), or the JSON
// answer of Prometheus' /api/v1/query_range for node_filesystem_avail_bytes or
// sandboxd_filesystem_avail_bytes, with the matching size_bytes (and files_free, files)
// series of the same filesystem beside it. size, when not 0, is the size of a series
// that has none (a query_range answer of avail alone). name is for messages.
func ReadSeries(r io.Reader, name string, size uint64) (Series, error) {
	br := bufio.NewReader(r)
	for {
		b, err := br.Peek(1)
		if err != nil {
			return Series{}, fmt.Errorf("%s: empty series", name)
		}
		if b[0] == ' ' || b[0] == '\t' || b[0] == '\n' || b[0] == '\r' {
			br.ReadByte()
			continue
		}
		var s Series
		if b[0] == '{' {
			s, err = readQueryRange(br, name, size)
		} else {
			s, err = readCSV(br, name, size)
		}
		if err != nil {
			return Series{}, err
		}
		if len(s.Points) == 0 {
			return Series{}, fmt.Errorf("%s: no samples", name)
		}
		return s, nil
	}
}

// csvColumns are the CSV header's names (CONTRACT §14).
var csvColumns = []string{"time", "avail_bytes", "size_bytes", "files_free", "files"}

func readCSV(r io.Reader, name string, size uint64) (Series, error) {
	cr := csv.NewReader(r)
	cr.Comment, cr.FieldsPerRecord, cr.TrimLeadingSpace, cr.ReuseRecord = '#', -1, true, true
	head, err := cr.Read()
	if err != nil {
		return Series{}, fmt.Errorf("%s: reading the header: %w", name, err)
	}
	col := map[string]int{}
	for i, h := range head {
		h = strings.ToLower(strings.TrimSpace(h))
		if !slices.Contains(csvColumns, h) {
			return Series{}, fmt.Errorf("%s: header column %q: want %s", name, h, strings.Join(csvColumns, ","))
		}
		col[h] = i
	}
	for _, need := range []string{"time", "avail_bytes"} {
		if _, ok := col[need]; !ok {
			return Series{}, fmt.Errorf("%s: the header has no %s column (want time,avail_bytes,size_bytes[,files_free,files])", name, need)
		}
	}
	if _, ok := col["size_bytes"]; !ok && size == 0 {
		return Series{}, fmt.Errorf("%s: the header has no size_bytes column and no size was given", name)
	}
	s := Series{Name: name}
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return s, nil
		}
		line, _ := cr.FieldPos(0)
		if err != nil {
			return Series{}, fmt.Errorf("%s: %w", name, err)
		}
		p, err := csvPoint(rec, col, size)
		if err != nil {
			return Series{}, fmt.Errorf("%s: line %d: %w", name, line, err)
		}
		if err := s.add(p); err != nil {
			return Series{}, fmt.Errorf("%s: line %d: %w", name, line, err)
		}
	}
}

func csvPoint(rec []string, col map[string]int, size uint64) (Point, error) {
	field := func(k string) (string, bool) {
		i, ok := col[k]
		if !ok || i >= len(rec) {
			return "", false
		}
		return strings.TrimSpace(rec[i]), true
	}
	var p Point
	ts, _ := field("time")
	t, err := parseTime(ts)
	if err != nil {
		return p, err
	}
	p.Time, p.SizeBytes = t, size
	for _, c := range []struct {
		k string
		v *uint64
	}{{"avail_bytes", &p.AvailBytes}, {"size_bytes", &p.SizeBytes}, {"files_free", &p.FilesFree}, {"files", &p.Files}} {
		v, ok := field(c.k)
		if !ok || (v == "" && c.k != "avail_bytes") {
			continue
		}
		n, err := parseCount(v)
		if err != nil {
			return p, fmt.Errorf("%s %q: %w", c.k, v, err)
		}
		*c.v = n
	}
	return p, nil
}

// add appends p, which must be later than the last point.
func (s *Series) add(p Point) error {
	if n := len(s.Points); n > 0 && !p.Time.After(s.Points[n-1].Time) {
		return fmt.Errorf("time %s is not after the previous sample's %s: a series goes forward", p.Time.UTC().Format(time.RFC3339Nano), s.Points[n-1].Time.UTC().Format(time.RFC3339Nano))
	}
	if len(s.Points) >= MaxPoints {
		return fmt.Errorf("more than %d samples: cut the series shorter or coarser", MaxPoints)
	}
	if p.SizeBytes > 0 && p.AvailBytes > p.SizeBytes {
		return fmt.Errorf("avail_bytes %d is above size_bytes %d", p.AvailBytes, p.SizeBytes)
	}
	if p.Files > 0 && p.FilesFree > p.Files {
		return fmt.Errorf("files_free %d is above files %d", p.FilesFree, p.Files)
	}
	s.Points = append(s.Points, p)
	return nil
}

// parseTime reads Unix seconds (with a fraction) or RFC 3339.
func parseTime(v string) (time.Time, error) {
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 || f > 1e11 {
			return time.Time{}, fmt.Errorf("time %q: want Unix seconds or RFC 3339", v)
		}
		sec, frac := math.Modf(f)
		return time.Unix(int64(sec), int64(math.Round(frac*1e9))).UTC(), nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("time %q: want Unix seconds or RFC 3339", v)
	}
	return t, nil
}

// parseCount reads a byte or inode count: an integer, or a float as Prometheus writes
// them ("1.073741824e+09").
func parseCount(v string) (uint64, error) {
	if n, err := strconv.ParseUint(v, 10, 64); err == nil {
		return n, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || f < 0 || f >= 1<<63 {
		return 0, errors.New("want a non-negative number")
	}
	return uint64(math.Round(f)), nil
}

// queryRange is the part of a Prometheus /api/v1/query_range answer that is read.
type queryRange struct {
	Status    string `json:"status"`
	Error     string `json:"error"`
	ErrorType string `json:"errorType"`
	Data      struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Values [][2]any          `json:"values"`
		} `json:"result"`
	} `json:"data"`
}

func readQueryRange(r io.Reader, name string, size uint64) (Series, error) {
	var q queryRange
	dec := json.NewDecoder(r)
	if err := dec.Decode(&q); err != nil {
		return Series{}, fmt.Errorf("%s: not a Prometheus query_range answer: %w", name, err)
	}
	if q.Status != "success" {
		return Series{}, fmt.Errorf("%s: Prometheus answered %q: %s %s", name, q.Status, q.ErrorType, q.Error)
	}
	if q.Data.ResultType != "matrix" {
		return Series{}, fmt.Errorf("%s: result type %q: want a range query's matrix (/api/v1/query_range)", name, q.Data.ResultType)
	}
	// Each result is one of the filesystem's metrics, told by its name's suffix.
	byKind := map[string]map[int64]float64{}
	labels := map[string]string{}
	for _, res := range q.Data.Result {
		kind := metricKind(res.Metric["__name__"], len(q.Data.Result))
		if kind == "" {
			return Series{}, fmt.Errorf("%s: series %s is none of *_avail_bytes, *_size_bytes, *_files_free, *_files", name, labelText(res.Metric))
		}
		if _, dup := byKind[kind]; dup {
			return Series{}, fmt.Errorf("%s: two %s series (%s and %s): narrow the query to one filesystem (mountpoint, instance)", name, kind, labels[kind], labelText(res.Metric))
		}
		labels[kind] = labelText(res.Metric)
		vals := map[int64]float64{}
		for _, v := range res.Values {
			ts, ok1 := v[0].(float64)
			str, ok2 := v[1].(string)
			f, err := strconv.ParseFloat(str, 64)
			if !ok1 || !ok2 || err != nil {
				return Series{}, fmt.Errorf("%s: %s: a value %v is not [time, \"number\"]", name, labels[kind], v)
			}
			if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
				continue // a stale marker or a gap
			}
			vals[int64(math.Round(ts*1000))] = f
		}
		byKind[kind] = vals
	}
	avail, ok := byKind["avail_bytes"]
	if !ok {
		return Series{}, fmt.Errorf("%s: no *_avail_bytes series in the answer", name)
	}
	if _, ok := byKind["size_bytes"]; !ok && size == 0 {
		return Series{}, fmt.Errorf("%s: no *_size_bytes series in the answer and no size given: query both, e.g. {__name__=~\"node_filesystem_(avail|size)_bytes\",mountpoint=\"/\"}", name)
	}
	times := make([]int64, 0, len(avail))
	for ms := range avail {
		times = append(times, ms)
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	s := Series{Name: name}
	for _, ms := range times {
		p := Point{Time: time.UnixMilli(ms).UTC(), Sample: Sample{AvailBytes: uint64(avail[ms]), SizeBytes: size}}
		if v, ok := byKind["size_bytes"][ms]; ok {
			p.SizeBytes = uint64(v)
		} else if n := len(s.Points); n > 0 && size == 0 {
			p.SizeBytes = s.Points[n-1].SizeBytes // the last known size
		}
		if p.SizeBytes == 0 {
			continue // no size yet
		}
		p.FilesFree = uint64(byKind["files_free"][ms])
		p.Files = uint64(byKind["files"][ms])
		if err := s.add(p); err != nil {
			return Series{}, fmt.Errorf("%s: at %s: %w", name, p.Time.Format(time.RFC3339), err)
		}
	}
	return s, nil
}

// metricKind tells a filesystem metric by its name; a lone result without a name (an
// expression's) is taken as the free space.
func metricKind(metric string, results int) string {
	if metric == "" && results == 1 {
		return "avail_bytes"
	}
	for _, k := range []string{"avail_bytes", "size_bytes", "files_free", "files"} {
		if strings.HasSuffix(metric, "_filesystem_"+k) {
			return k
		}
	}
	return ""
}

func labelText(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%q", k, m[k])
	}
	b.WriteByte('}')
	return b.String()
}

// WriteCSV writes s in the CSV form ReadSeries reads (files columns when any point has
// inode figures).
func WriteCSV(w io.Writer, s Series) error {
	files := slices.ContainsFunc(s.Points, func(p Point) bool { return p.Files > 0 })
	bw := bufio.NewWriter(w)
	if files {
		bw.WriteString("time,avail_bytes,size_bytes,files_free,files\n")
	} else {
		bw.WriteString("time,avail_bytes,size_bytes\n")
	}
	for _, p := range s.Points {
		ts := strconv.FormatFloat(float64(p.Time.UnixNano())/1e9, 'f', 3, 64)
		if files {
			fmt.Fprintf(bw, "%s,%d,%d,%d,%d\n", ts, p.AvailBytes, p.SizeBytes, p.FilesFree, p.Files)
		} else {
			fmt.Fprintf(bw, "%s,%d,%d\n", ts, p.AvailBytes, p.SizeBytes)
		}
	}
	return bw.Flush()
}

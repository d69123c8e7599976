package backtest

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestReadSeriesCSV(t *testing.T) {
	in := `# recorded by scripts/record-series.sh
time,avail_bytes,size_bytes,files_free,files
1764763200,1073741824,4294967296,1000,2000

1764763201.5,1073700000,4294967296,999,2000
2026-12-03T12:00:03Z,1.0736e+09,4294967296,,
`
	s, err := ReadSeries(strings.NewReader(in), "x.csv", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Points) != 3 {
		t.Fatalf("%d points", len(s.Points))
	}
	p := s.Points[1]
	if p.Time != time.Unix(1764763201, 5e8).UTC() || p.AvailBytes != 1073700000 || p.FilesFree != 999 || p.Files != 2000 {
		t.Fatalf("point 1: %+v", p)
	}
	if p := s.Points[2]; p.AvailBytes != 1073600000 || p.Files != 0 || !p.Time.Equal(time.Date(2026, 12, 3, 12, 0, 3, 0, time.UTC)) {
		t.Fatalf("point 2: %+v", p)
	}
	// Columns in any order; size from the caller.
	s, err = ReadSeries(strings.NewReader("avail_bytes,time\n5,10\n4,11\n"), "y", 100)
	if err != nil || s.Points[1].SizeBytes != 100 || s.Points[1].AvailBytes != 4 {
		t.Fatalf("%v %+v", err, s)
	}
}

func TestReadSeriesErrorsNameTheLine(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", "empty series"},
		{"time,avail_bytes,size_bytes\n", "no samples"},
		{"time,avail,size_bytes\n1,2,3\n", `header column "avail"`},
		{"time,size_bytes\n1,2\n", "no avail_bytes column"},
		{"time,avail_bytes\n1,2\n", "no size_bytes column"},
		{"time,avail_bytes,size_bytes\n1,2,3\n1,2,3\n", "line 3: time"},
		{"time,avail_bytes,size_bytes\n1,2,3\nyesterday,2,3\n", "line 3: time \"yesterday\""},
		{"time,avail_bytes,size_bytes\n1,-2,3\n", "line 2: avail_bytes \"-2\""},
		{"time,avail_bytes,size_bytes\n1,5,3\n", "line 2: avail_bytes 5 is above size_bytes 3"},
		{`{"status":"error","errorType":"bad_data","error":"parse error"}`, `Prometheus answered "error": bad_data parse error`},
		{`{"status":"success","data":{"resultType":"vector","result":[]}}`, "want a range query's matrix"},
		{`{"status":"success","data":{"resultType":"matrix","result":[` +
			`{"metric":{"__name__":"node_filesystem_avail_bytes","mountpoint":"/"},"values":[[1,"2"]]},` +
			`{"metric":{"__name__":"node_filesystem_avail_bytes","mountpoint":"/data"},"values":[[1,"2"]]}]}}`, "narrow the query"},
		{`{"status":"success","data":{"resultType":"matrix","result":[` +
			`{"metric":{"__name__":"node_filesystem_avail_bytes","mountpoint":"/"},"values":[[1,"2"]]}]}}`, "no *_size_bytes series"},
		{`{"status":"success","data":{"resultType":"matrix","result":[` +
			`{"metric":{"__name__":"up"},"values":[[1,"2"]]}]}}`, "none of *_avail_bytes"},
		{`{"status":`, "not a Prometheus query_range answer"},
	} {
		_, err := ReadSeries(strings.NewReader(c.in), "s", 0)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.in, err, c.want)
		}
	}
}

func TestReadSeriesQueryRange(t *testing.T) {
	vals := func(f func(i int) int) string {
		var b []string
		for i := 0; i < 4; i++ {
			b = append(b, fmt.Sprintf(`[%d.5,"%d"]`, 1764763200+15*i, f(i)))
		}
		return strings.Join(b, ",")
	}
	for _, prefix := range []string{"node", "sandboxd"} {
		in := `{"status":"success","data":{"resultType":"matrix","result":[` +
			`{"metric":{"__name__":"` + prefix + `_filesystem_avail_bytes","mountpoint":"/"},"values":[` + vals(func(i int) int { return 1000 - i }) + `,[1764763260.5,"NaN"]]},` +
			`{"metric":{"__name__":"` + prefix + `_filesystem_size_bytes","mountpoint":"/"},"values":[` + vals(func(int) int { return 4000 }) + `]},` +
			`{"metric":{"__name__":"` + prefix + `_filesystem_files_free","mountpoint":"/"},"values":[` + vals(func(i int) int { return 50 - i }) + `]},` +
			`{"metric":{"__name__":"` + prefix + `_filesystem_files","mountpoint":"/"},"values":[` + vals(func(int) int { return 100 }) + `]}]}}`
		s, err := ReadSeries(strings.NewReader(in), prefix, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Points) != 4 || s.Interval() != 15*time.Second {
			t.Fatalf("%s: %d points every %v", prefix, len(s.Points), s.Interval())
		}
		if p := s.Points[3]; p.AvailBytes != 997 || p.SizeBytes != 4000 || p.FilesFree != 47 || p.Files != 100 || p.Time != time.UnixMilli(1764763245500).UTC() {
			t.Fatalf("%s: %+v", prefix, p)
		}
	}
	// An expression's lone unnamed result is the free space; the size comes from --size.
	in := `{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"mountpoint":"/"},"values":[[1,"7"],[2,"6"]]}]}}`
	s, err := ReadSeries(strings.NewReader(in), "expr", 64)
	if err != nil || len(s.Points) != 2 || s.Points[1].AvailBytes != 6 || s.Points[1].SizeBytes != 64 {
		t.Fatalf("%v %+v", err, s)
	}
}

package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// FuzzParse: Parse never panics; what it refuses is a *ValidationError of problems that
// each say something; what it accepts validates and survives Marshal and Parse unchanged.
func FuzzParse(f *testing.F) {
	f.Add([]byte(Default()))
	files, _ := filepath.Glob("testdata/*.toml")
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("site = []\nmount = [{name = \"m\", path = \"/m\", links = [{path = \"/l\", target = \"/m\"}]}]\n"))
	f.Add([]byte("[[filesystem]]\npath = \"/\"\nreclaim_below = \"50%\"\nreplace_below = 1\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, "fuzz.toml")
		if err != nil {
			var ve *ValidationError
			if !errors.As(err, &ve) || len(ve.Problems) == 0 {
				t.Fatalf("refusal is not a list of problems: %T %v", err, err)
			}
			for _, p := range ve.Problems {
				if p.Msg == "" {
					t.Fatalf("problem without a message: %+v", p)
				}
				// An unknown key is always written in the file: the scanner must find it.
				if strings.HasPrefix(p.Msg, "unknown key") && p.Line == 0 {
					t.Fatalf("unknown key without a line: %+v\n%q", p, data)
				}
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("accepted config does not validate: %v", err)
		}
		out, err := Marshal(c)
		if err != nil {
			t.Fatalf("accepted config does not marshal: %v", err)
		}
		back, err := Parse(out, "marshalled")
		if err != nil {
			t.Fatalf("marshalled config is refused: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(back, c) {
			t.Fatalf("round trip changed the config:\n got %+v\nwant %+v", back, c)
		}
	})
}

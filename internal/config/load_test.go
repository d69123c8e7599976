package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// LoadOrDefault is the default with no path, the file over the default with one, and a
// missing file is an error the caller can recognise, never a silent default.
func TestLoadOrDefault(t *testing.T) {
	def, err := LoadOrDefault("")
	if err != nil || !reflect.DeepEqual(def, mustParse(t, Default())) {
		t.Fatalf("LoadOrDefault(\"\") = %+v, %v; want the embedded default", def, err)
	}
	p := filepath.Join(t.TempDir(), "sandboxd.toml")
	if err := os.WriteFile(p, []byte("version = 1\n[launch]\ndeadline = \"5s\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := LoadOrDefault(p)
	if err != nil || c.Launch.Deadline != 5*time.Second || !reflect.DeepEqual(c.Filesystems, def.Filesystems) {
		t.Fatalf("LoadOrDefault(file) = %+v, %v; want the file's deadline over the default", c, err)
	}
	if _, err := LoadOrDefault(filepath.Join(t.TempDir(), "missing.toml")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("LoadOrDefault(missing file) = %v; want an error matching fs.ErrNotExist", err)
	}
}

package mountwatch

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestReadBoundedRefusesWhatIsNotACredential: a device, a FIFO nobody writes, a symlink,
// a directory and a file past the cap are refused at once with ErrCredentialFile, naming
// why; a real credential file is read.
func TestReadBoundedRefusesWhatIsNotACredential(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	os.Symlink("/dev/zero", link)
	big := filepath.Join(dir, "big")
	os.WriteFile(big, make([]byte, MaxCredentialFileSize+1), 0o600)
	good := filepath.Join(dir, "good")
	os.WriteFile(good, []byte(`{"Expiration":"2099-01-01T00:00:00Z"}`), 0o600)
	for path, want := range map[string]string{"/dev/zero": "character device", fifo: "FIFO", link: "symlink", dir: "directory", big: "65537 bytes"} {
		_, _, err := readCredential(path, 0.8)
		if !errors.Is(err, ErrCredentialFile) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want ErrCredentialFile naming %q", path, err, want)
		}
	}
	c, _, err := readCredential(good, 0.8)
	if err != nil || !c.known || c.expires.Year() != 2099 {
		t.Errorf("good file: %+v %v", c, err)
	}
}

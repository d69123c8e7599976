package daemon

import (
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/api"
)

// TestImpossibleNeedSaidOnce: the README's `sandboxd launch --need-bytes 1TiB` ended its
// detail with "...no reclaim can meet it, nothing was deleted; the call needs 1.0 TiB
// free" — the need twice. The refusal says each thing once.
func TestImpossibleNeedSaidOnce(t *testing.T) {
	fs := api.Filesystem{Path: "/", SizeBytes: 252 << 30, AvailBytes: 75 << 30, ReclaimThresholdBytes: 1 << 30}
	note := "the call needs 1.0 TiB free, more than the filesystem's whole size 252.0 GiB: no reclaim can meet it, nothing was deleted"
	p := spaceProblem(fs, 1<<40, 0, []string{note})
	if n := strings.Count(p.Detail, "the call needs 1.0 TiB free"); n != 1 || p.Code != api.CodeDiskFull {
		t.Errorf("%s: the need said %d times: %s", p.Code, n, p.Detail)
	}
	p = spaceProblem(fs, 100<<30, 0, nil)
	if !strings.Contains(p.Detail, "the call needs 100.0 GiB free") {
		t.Errorf("a need no note names is still said: %s", p.Detail)
	}
}

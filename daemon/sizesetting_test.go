package daemon

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// TestSizeSettingIsNamedEverywhere: with [[filesystem]] size_setting set, a full disk's
// launch refusal, resume verdict and conditions all name what sizes the disk; status
// carries it and says whether [reclaim] offline is set (issue 10, items 9 and 6).
func TestSizeSettingIsNamedEverywhere(t *testing.T) {
	const setting = "[openshell.drivers.vm] overlay_disk_mib"
	mnt, _, body := siteOnTmpfs(t, 16<<20, 0, fmt.Sprintf("size_setting = %q\n", setting))
	fillToFull(t, mnt)
	td := startDaemon(t, body, func(o *Options) { o.Config.Reclaim.Offline = true })
	want := "100% used) and "
	clause := "; this disk is sized by " + setting

	status, _, p := launch(t, td, `{}`)
	if status == 200 || !strings.Contains(p.Detail, want) || !strings.Contains(p.Detail, clause) {
		t.Errorf("launch refusal: %d %q, want the fingerprint to end its filesystem part with %q", status, p.Detail, clause)
	}
	_, run, rp, _ := resumeRun(t, td, `{}`)
	if !strings.Contains(run.Detail, clause) {
		t.Errorf("resume detail %q%s lacks %q", run.Detail, rp.Detail, clause)
	}
	var st *api.Status
	poll(t, time.Minute, "DiskPressure and ReplaceRecommended naming the setting", func() bool {
		st, _ = td.client.Status(t.Context())
		d, r := condition(st, api.CondDiskPressure, mnt), condition(st, api.CondReplaceRecommended, mnt)
		return d.Status && r.Status && strings.HasSuffix(d.Message, clause) && strings.Contains(r.Message, clause)
	})
	if st.Filesystems[0].SizeSetting != setting {
		t.Errorf("status size_setting %q", st.Filesystems[0].SizeSetting)
	}
	if !st.Offline {
		t.Error("status offline false with [reclaim] offline = true")
	}
}

package config

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/units"
)

// Marshal renders c as a complete config file, every key written out, in the order of
// default.toml (what `sandboxd config show` prints). Parse reads it back to an equal
// Config. Sizes are written with the largest unit that keeps them exact.
func Marshal(c *Config) ([]byte, error) {
	w := &writer{}
	w.kv("version", strconv.Itoa(c.Version))
	// Empty lists must be written, or reading back would bring the default list back;
	// as top-level keys they must come before the first table header.
	for _, e := range []struct {
		key   string
		empty bool
	}{{"filesystem", len(c.Filesystems) == 0}, {"site", len(c.Sites) == 0}, {"mount", len(c.Mounts) == 0}} {
		if e.empty {
			w.kv(e.key, "[]")
		}
	}

	s := c.Server
	w.header("[server]")
	w.kv("socket", w.str(s.Socket))
	w.kv("socket_mode", w.str(fmt.Sprintf("%04o", uint32(s.SocketMode))))
	w.kv("socket_group", w.str(s.SocketGroup))
	w.kv("writers", w.strs(s.Writers))
	w.kv("http", w.str(s.HTTP))
	w.kv("state_dir", w.str(s.StateDir))
	w.kv("mode", w.str(s.Mode))

	w.header("[log]")
	w.kv("level", w.str(c.Log.Level))
	w.kv("format", w.str(c.Log.Format))

	w.header("[metrics]")
	w.kv("textfile", w.str(c.Metrics.Textfile))
	w.kv("textfile_interval", fmtDuration(c.Metrics.TextfileInterval))

	w.header("[health]")
	w.kv("transition_period", fmtDuration(c.Health.TransitionPeriod))
	w.kv("sample_interval", fmtDuration(c.Health.SampleInterval))

	w.header("[launch]")
	w.kv("deadline", fmtDuration(c.Launch.Deadline))
	w.kv("need_bytes", fmtSize(c.Launch.NeedBytes))
	w.kv("need_inodes", strconv.FormatUint(c.Launch.NeedInodes, 10))

	for _, f := range c.Filesystems {
		w.header("[[filesystem]]")
		w.kv("path", w.str(f.Path))
		w.kv("reclaim_below", w.bytesThreshold(f.ReclaimBelow))
		w.kv("replace_below", w.bytesThreshold(f.ReplaceBelow))
		w.kv("reclaim_below_inodes", w.countThreshold(f.ReclaimBelowInodes))
		w.kv("replace_below_inodes", w.countThreshold(f.ReplaceBelowInodes))
		w.kv("reserve", fmtSize(f.Reserve))
		w.kv("reserve_path", w.str(f.ReservePath))
		w.kv("warn_time_to_full", fmtDuration(f.WarnTimeToFull))
		w.kv("size_setting", w.str(f.SizeSetting))
	}

	for _, st := range c.Sites {
		w.header("[[site]]")
		w.kv("name", w.str(st.Name))
		w.kv("path", w.str(st.Path))
		w.kv("owner", w.str(st.Owner))
		w.kv("max_age", fmtDuration(st.MaxAge))
		w.kv("min_age", fmtDuration(st.MinAge))
		w.kv("max_files", strconv.FormatInt(st.MaxFiles, 10))
		w.kv("max_bytes", fmtSize(st.MaxBytes))
		w.kv("drain_rate", strconv.FormatInt(st.DrainRate, 10))
	}

	r := c.Reclaim
	w.header("[reclaim]")
	w.kv("auto_caches", w.strs(r.AutoCaches))
	w.kv("protect", w.strs(r.Protect))
	w.kv("min_age", fmtDuration(r.MinAge))
	w.kv("headroom", fmtSize(r.Headroom))
	w.kv("headroom_inodes", w.countThreshold(r.HeadroomInodes))
	w.kv("cooldown", fmtDuration(r.Cooldown))
	w.kv("max_runs_per_hour", strconv.FormatInt(r.MaxRunsPerHour, 10))
	w.kv("lead_time", fmtDuration(r.LeadTime))
	w.kv("offline", strconv.FormatBool(r.Offline))
	if len(r.Caches) == 0 {
		w.kv("cache", "[]")
	}
	for _, ca := range r.Caches {
		w.header("[[reclaim.cache]]")
		w.kv("name", w.str(ca.Name))
		w.kv("path", w.str(ca.Path))
		w.kv("command", w.strs(ca.Command))
		w.kv("order", strconv.FormatInt(ca.Order, 10))
		w.kv("ladder", w.str(ca.Ladder))
	}

	for _, m := range c.Mounts {
		w.header("[[mount]]")
		w.kv("name", w.str(m.Name))
		w.kv("path", w.str(m.Path))
		w.kv("required", strconv.FormatBool(m.Required))
		w.kv("probe_interval", fmtDuration(m.ProbeInterval))
		w.kv("probe_timeout", fmtDuration(m.ProbeTimeout))
		w.kv("canary", strconv.FormatBool(m.Canary))
		w.kv("remount_unit", w.str(m.RemountUnit))
		w.kv("remount_command", w.strs(m.RemountCommand))
		w.kv("credential_file", w.str(m.CredentialFile))
		w.kv("refresh_command", w.strs(m.RefreshCommand))
		w.kv("refresh_at", fmtFloat(m.RefreshAt))
		w.kv("max_remounts_per_hour", strconv.FormatInt(m.MaxRemountsPerHour, 10))
		w.kv("remount_timeout", fmtDuration(m.RemountTimeout))
		links := make([]string, len(m.Links))
		for i, l := range m.Links {
			links[i] = fmt.Sprintf("{path = %s, target = %s}", w.str(l.Path), w.str(l.Target))
		}
		w.kv("links", "["+strings.Join(links, ", ")+"]")
		w.kv("guard", strconv.FormatBool(m.Guard))
		uids := make([]string, len(m.PushUIDs))
		for i, u := range m.PushUIDs {
			uids[i] = strconv.FormatUint(uint64(u), 10)
		}
		w.kv("push_uids", "["+strings.Join(uids, ", ")+"]")
	}

	w.header("[mounts]")
	w.kv("max_registered", strconv.FormatInt(c.RuntimeMounts.MaxRegistered, 10))
	w.kv("max_registered_per_uid", strconv.FormatInt(c.RuntimeMounts.MaxPerUID, 10))

	w.header("[jobs]")
	w.kv("cgroup_root", w.str(c.Jobs.CgroupRoot))
	w.kv("default_ttl", fmtDuration(c.Jobs.DefaultTTL))
	w.kv("max_lifetime", fmtDuration(c.Jobs.MaxLifetime))
	w.kv("grace", fmtDuration(c.Jobs.Grace))
	w.kv("unleased_max", fmtDuration(c.Jobs.UnleasedMax))
	w.kv("keep_ended", fmtDuration(c.Jobs.KeepEnded))
	w.kv("keep_ended_max", strconv.FormatInt(c.Jobs.KeepEndedMax, 10))
	w.kv("registry_dir", w.str(c.Jobs.RegistryDir))
	w.kv("max_per_uid", strconv.FormatInt(c.Jobs.MaxPerUID, 10))
	if w.err != nil {
		return nil, w.err
	}
	return w.buf.Bytes(), nil
}

// writer accumulates TOML text and the first value that cannot be written.
type writer struct {
	buf bytes.Buffer
	err error
}

func (w *writer) header(h string) { fmt.Fprintf(&w.buf, "\n%s\n", h) }

func (w *writer) kv(k, v string) { fmt.Fprintf(&w.buf, "%s = %s\n", k, v) }

// str quotes s as a TOML basic string. TOML strings are UTF-8, so other bytes are an error.
func (w *writer) str(s string) string {
	if !utf8.ValidString(s) {
		w.fail(fmt.Errorf("marshal config: %q is not valid UTF-8", s))
	}
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func (w *writer) strs(list []string) string {
	q := make([]string, len(list))
	for i, s := range list {
		q[i] = w.str(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

func (w *writer) fail(err error) {
	if w.err == nil {
		w.err = err
	}
}

func (w *writer) bytesThreshold(t units.Threshold) string {
	if t.Percent {
		return fmtPercent(t.Pct)
	}
	if t.Amount > math.MaxInt64 {
		w.fail(fmt.Errorf("marshal config: threshold of %d bytes is too large", t.Amount))
	}
	return fmtSize(api.Size(t.Amount))
}

func (w *writer) countThreshold(t units.Threshold) string {
	if t.Percent {
		return fmtPercent(t.Pct)
	}
	if t.Amount > math.MaxInt64 {
		w.fail(fmt.Errorf("marshal config: threshold of %d inodes is too large", t.Amount))
	}
	return strconv.FormatUint(t.Amount, 10)
}

func fmtPercent(p float64) string { return `"` + strconv.FormatFloat(p, 'f', -1, 64) + `%"` }

// fmtDuration writes "12h" rather than "12h0m0s".
func fmtDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return `"` + s + `"`
}

// fmtSize writes the size with the largest binary unit that keeps it exact with at
// most three decimals ("1.5GiB"), else in bytes.
func fmtSize(s api.Size) string {
	for _, u := range []struct {
		name string
		mult int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if int64(s) < u.mult {
			continue
		}
		num := strconv.FormatFloat(float64(s)/float64(u.mult), 'f', -1, 64)
		if _, frac, _ := strings.Cut(num, "."); len(frac) > 3 {
			continue
		}
		if back, err := api.ParseSize(num + u.name); err == nil && back == s {
			return `"` + num + u.name + `"`
		}
	}
	return `"` + strconv.FormatInt(int64(s), 10) + `"`
}

// fmtFloat writes a TOML float, which needs a "." or an exponent, and spells nan and
// inf the TOML way.
func fmtFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	s := strconv.FormatFloat(f, 'g', -1, 64)
	if !strings.ContainsAny(s, ".e") {
		s += ".0"
	}
	return s
}

package api

import (
	"encoding/json"
	"math"
	"strconv"
	"time"
	"unicode/utf8"
)

// Launch answers are encoded by hand (issue 27: encoding/json's reflection was a fifth of
// a launch's own work). AppendJSON writes exactly the bytes json.Marshal writes for the
// same value (TestAppendJSONIsMarshal fills every field, at every depth, and compares);
// a field added to these types without its line here fails that test. What it cannot
// write as Marshal would (a NaN or infinite float, a time outside years 0-9999) it
// reports with ok false, and the caller uses encoding/json, which says why.

// AppendJSON appends json.Marshal(r) to dst; ok false means it could not (see above).
func (r *LaunchResponse) AppendJSON(dst []byte) (_ []byte, ok bool) {
	dst = append(dst, `{"ok":`...)
	dst = strconv.AppendBool(dst, r.OK)
	dst = append(dst, `,"site":`...)
	if r.Site == nil {
		dst = append(dst, "null"...)
	} else if dst, ok = r.Site.AppendJSON(dst); !ok {
		return dst, false
	}
	dst = strconv.AppendInt(append(dst, `,"pruned":`...), r.Pruned, 10)
	dst = appendStrings(append(dst, `,"pruned_jobs":`...), r.PrunedJobs)
	dst = strconv.AppendInt(append(dst, `,"freed_bytes":`...), r.FreedBytes, 10)
	dst = append(dst, `,"filesystem":`...)
	if r.Filesystem == nil {
		dst = append(dst, "null"...)
	} else if dst, ok = r.Filesystem.AppendJSON(dst); !ok {
		return dst, false
	}
	dst = append(dst, `,"mounts":`...)
	switch {
	case r.Mounts == nil:
		dst = append(dst, "null"...)
	case len(r.Mounts) == 0:
		dst = append(dst, "[]"...)
	default:
		// Mounts are in few launch answers (a call that names them): encoding/json's.
		b, err := json.Marshal(r.Mounts)
		if err != nil {
			return dst, false
		}
		dst = append(dst, b...)
	}
	dst = appendStringPtr(append(dst, `,"advice":`...), r.Advice)
	if r.Verdict != "" {
		dst = appendJSONString(append(dst, `,"verdict":`...), r.Verdict)
	}
	if r.Detail != "" {
		dst = appendJSONString(append(dst, `,"detail":`...), r.Detail)
	}
	if len(r.Warnings) > 0 {
		dst = appendStrings(append(dst, `,"warnings":`...), r.Warnings)
	}
	return append(dst, '}'), true
}

// AppendJSON appends json.Marshal(s) to dst; ok false means it could not.
func (s *Site) AppendJSON(dst []byte) (_ []byte, ok bool) {
	dst = appendJSONString(append(dst, `{"name":`...), s.Name)
	dst = appendJSONString(append(dst, `,"path":`...), s.Path)
	dst = strconv.AppendInt(append(dst, `,"files":`...), s.Files, 10)
	dst = strconv.AppendInt(append(dst, `,"bytes":`...), s.Bytes, 10)
	dst = strconv.AppendInt(append(dst, `,"jobs":`...), s.Jobs, 10)
	dst = strconv.AppendInt(append(dst, `,"running_jobs":`...), s.RunningJobs, 10)
	if dst, ok = appendJSONFloat(append(dst, `,"oldest_age_seconds":`...), s.OldestAgeSeconds); !ok {
		return dst, false
	}
	if dst, ok = appendJSONFloat(append(dst, `,"max_age_seconds":`...), s.MaxAgeSeconds); !ok {
		return dst, false
	}
	dst = strconv.AppendInt(append(dst, `,"pending_prune":`...), s.PendingPrune, 10)
	dst = strconv.AppendInt(append(dst, `,"pruned_total":`...), s.PrunedTotal, 10)
	dst = append(dst, `,"last_prune_at":`...)
	if s.LastPruneAt == nil {
		dst = append(dst, "null"...)
	} else if dst, ok = appendJSONTime(dst, *s.LastPruneAt); !ok {
		return dst, false
	}
	dst = appendStringPtr(append(dst, `,"problem":`...), s.Problem)
	return append(dst, '}'), true
}

// AppendJSON appends json.Marshal(fs) to dst; ok false means it could not.
func (fs *Filesystem) AppendJSON(dst []byte) (_ []byte, ok bool) {
	dst = appendJSONString(append(dst, `{"path":`...), fs.Path)
	dst = appendJSONString(append(dst, `,"mountpoint":`...), fs.Mountpoint)
	dst = appendJSONString(append(dst, `,"device":`...), fs.Device)
	dst = appendJSONString(append(dst, `,"devno":`...), fs.Devno)
	dst = appendJSONString(append(dst, `,"fstype":`...), fs.FSType)
	dst = strconv.AppendUint(append(dst, `,"size_bytes":`...), fs.SizeBytes, 10)
	dst = strconv.AppendUint(append(dst, `,"avail_bytes":`...), fs.AvailBytes, 10)
	dst = strconv.AppendUint(append(dst, `,"free_bytes":`...), fs.FreeBytes, 10)
	if dst, ok = appendJSONFloat(append(dst, `,"used_ratio":`...), fs.UsedRatio); !ok {
		return dst, false
	}
	dst = strconv.AppendUint(append(dst, `,"files":`...), fs.Files, 10)
	dst = strconv.AppendUint(append(dst, `,"files_free":`...), fs.FilesFree, 10)
	if dst, ok = appendJSONFloat(append(dst, `,"growth_bytes_per_second":`...), fs.GrowthBytesPerSecond); !ok {
		return dst, false
	}
	dst = append(dst, `,"predicted_full_seconds":`...)
	if fs.PredictedFullSeconds == nil {
		dst = append(dst, "null"...)
	} else if dst, ok = appendJSONFloat(dst, *fs.PredictedFullSeconds); !ok {
		return dst, false
	}
	dst = strconv.AppendUint(append(dst, `,"reclaim_threshold_bytes":`...), fs.ReclaimThresholdBytes, 10)
	if fs.ReclaimThresholdWhy != "" {
		dst = appendJSONString(append(dst, `,"reclaim_threshold_reason":`...), fs.ReclaimThresholdWhy)
	}
	dst = strconv.AppendUint(append(dst, `,"replace_threshold_bytes":`...), fs.ReplaceThresholdBytes, 10)
	dst = strconv.AppendUint(append(dst, `,"reclaim_threshold_inodes":`...), fs.ReclaimThresholdFiles, 10)
	dst = strconv.AppendUint(append(dst, `,"replace_threshold_inodes":`...), fs.ReplaceThresholdFiles, 10)
	dst = strconv.AppendUint(append(dst, `,"reserve_bytes":`...), fs.ReserveBytes, 10)
	if fs.ReserveReleasedBytes != 0 {
		dst = strconv.AppendUint(append(dst, `,"reserve_released_bytes":`...), fs.ReserveReleasedBytes, 10)
	}
	if fs.Verdict != "" {
		dst = appendJSONString(append(dst, `,"verdict":`...), fs.Verdict)
	}
	if fs.ReplaceMark != "" {
		dst = appendJSONString(append(dst, `,"replace_mark":`...), fs.ReplaceMark)
	}
	if fs.SizeSetting != "" {
		dst = appendJSONString(append(dst, `,"size_setting":`...), fs.SizeSetting)
	}
	dst = strconv.AppendBool(append(dst, `,"stale":`...), fs.Stale)
	if fs.Error != "" {
		dst = appendJSONString(append(dst, `,"error":`...), fs.Error)
	}
	if fs.Errno != "" {
		dst = appendJSONString(append(dst, `,"errno":`...), fs.Errno)
	}
	if fs.ErrorSince != nil {
		if dst, ok = appendJSONTime(append(dst, `,"error_since":`...), *fs.ErrorSince); !ok {
			return dst, false
		}
	}
	if dst, ok = appendJSONTime(append(dst, `,"sampled_at":`...), fs.SampledAt); !ok {
		return dst, false
	}
	// Duration is a TextMarshaler: encoding/json quotes (and escapes) its text.
	dst = appendJSONString(append(dst, `,"growth_window":`...), time.Duration(fs.GrowthWindow).String())
	return append(dst, '}'), true
}

// appendJSONFloat is encoding/json's float64 encoding (ES6 number formatting); ok false
// for NaN and infinities, which it refuses.
func appendJSONFloat(dst []byte, f float64) ([]byte, bool) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return dst, false
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'e' {
		// e-09 to e-9, as encoding/json
		n := len(dst)
		if n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst, true
}

// appendJSONTime is time.Time's MarshalJSON (RFC 3339 with nanoseconds, quoted); ok
// false where that fails (a year outside 0-9999).
func appendJSONTime(dst []byte, t time.Time) ([]byte, bool) {
	dst = append(dst, '"')
	dst, err := t.AppendText(dst)
	if err != nil {
		return dst, false
	}
	return append(dst, '"'), true
}

func appendStringPtr(dst []byte, s *string) []byte {
	if s == nil {
		return append(dst, "null"...)
	}
	return appendJSONString(dst, *s)
}

func appendStrings(dst []byte, ss []string) []byte {
	if ss == nil {
		return append(dst, "null"...)
	}
	dst = append(dst, '[')
	for i, s := range ss {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSONString(dst, s)
	}
	return append(dst, ']')
}

// appendJSONString is encoding/json's string encoding with HTML escaping (Marshal's
// default): ", \ and control characters escaped, <, > and & as \u003c..., invalid UTF-8
// as \ufffd, U+2028 and U+2029 escaped.
func appendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

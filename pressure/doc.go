// Package pressure owns sandboxd's watched filesystems: it samples each one with statfs
// off the caller's goroutine (at most one outstanding call per filesystem, so a hung FUSE
// path costs one blocked goroutine and a "stale" flag, never a stalled loop), tracks how
// fast writes consume space, predicts the time to full, resolves the byte and inode
// thresholds (adaptive to the growth rate) and keeps the pressure conditions
// (DiskPressure, InodePressure, DiskFillingUp, ReplaceRecommended) with hysteresis so they
// cannot flap. Everything it exposes is a plain Go value; the daemon turns it into
// /v1/status, /v1/health and metrics.
//
// It changes nothing on disk, in processes or in mounts, so it has no observe mode of its
// own: in observe mode the daemon runs it unchanged.
package pressure

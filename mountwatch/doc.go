// Package mountwatch owns the health of FUSE mounts: it discovers them from mountinfo,
// probes each configured one from a child process run as the mount's owner (one long-lived
// probe server per owner, probeserver.go; a stat of
// the mount root proves nothing: geesefs answers it from memory while every lookup fails),
// classifies the result (healthy, denied, disconnected, hung, missing), refreshes
// credentials before they expire against the wall clock, and walks a remediation ladder
// (refresh, abort the connection, remount) with backoff and an hourly limit. It fails
// closed: Check refuses a launch while a required or requested mount is unhealthy, and an
// optional guard keeps a bare mountpoint immutable so writes cannot land on the local disk.
// It also keeps symlinks into the mounts in place, rebuilding only what holds no data.
//
// Background: FIELD-NOTES "FUSE mounts"; contract: CONTRACT §3, §4, §5 step 3, §6.1, §7.
package mountwatch

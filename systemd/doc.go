// Package systemd is sandboxd's thin leaf over go-systemd: the sd_notify protocol
// (READY, STATUS, RELOADING, STOPPING), a watchdog that pings only while the daemon's
// supervisor loop is fresh, socket activation, and unit restarts over D-Bus for
// mountwatch's remediation. It owns no policy: the daemon decides what to say and when.
//
// Everything here is silent and free when the process does not run under systemd: no
// NOTIFY_SOCKET means every notification is a no-op, no LISTEN_FDS means no listeners.
//
// go-systemd's helpers take an "unset the environment" flag. This package never passes
// true for notifications or the watchdog (unsetting NOTIFY_SOCKET or WATCHDOG_* silences
// every later call), and reads the socket-activation variables exactly once, since
// go-systemd always unsets LISTEN_* there.
package systemd

// Package fusetest serves a geesefs-like FUSE filesystem for tests, from a child process
// of the test binary, so that a test can kill the server (the mount goes dead: ENOTCONN)
// or make it stop answering (hung) without hanging its own process.
//
// The filesystem mirrors a backing directory. With a credential file (JSON with an RFC 3339
// "Expiration") it behaves like geesefs once its S3 credentials have expired: lookup,
// opendir, readdir and create answer EACCES while getattr still answers, because geesefs
// serves the root's attributes from memory (FIELD-NOTES "FUSE mounts").
//
// A test binary that uses it calls Main first thing in its TestMain; Main runs the child
// roles (serve, start) when the binary is re-executed for them and returns otherwise.
// Start mounts a server on a directory and registers a cleanup that aborts the
// connection, kills every server it started (also those a remount command started) and
// detaches the mount, so no hung mount outlives the test.
package fusetest

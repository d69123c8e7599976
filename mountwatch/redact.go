package mountwatch

import redactpkg "github.com/sandboxd/sandboxd/internal/redact"

// No secret reaches the trail (issue 21): a refresh_command prints credentials (the AWS
// credential_process document carries SecretAccessKey and SessionToken), and the event log
// is readable by anyone who can connect and is written to the journal. So a command's
// output is never stored; a failure keeps at most the first line of its stderr, and that
// line and every argv shown pass through redact (internal/redact, shared with reclaim's
// commands).

func redact(s string) string { return redactpkg.String(s) }

func redactArgv(argv []string) []string { return redactpkg.Argv(argv) }

func firstLine(s string) string { return redactpkg.FirstLine(s) }

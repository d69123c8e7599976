// Package redact keeps secrets out of the trail (issue 21): a command's output may carry
// credentials (a refresh_command prints the AWS credential_process document with
// SecretAccessKey and SessionToken; a cache tool may echo a registry token), and the event
// log is readable by anyone who can connect and is written to the journal. What of a
// command's output or argv reaches an event or a log line passes through String.
package redact

import (
	"regexp"
	"strings"
)

// Redacted replaces a value that looks like a key.
const Redacted = "[redacted]"

var (
	// "SecretAccessKey": "...", 'token': '...' (JSON or a Python dict printed).
	secretField = regexp.MustCompile(`(?i)(["']?[A-Za-z_-]*(?:secret|token|password|passwd|credential|private|session|signature|auth|key)[A-Za-z_-]*["']?\s*[:=]\s*)("[^"]*"|'[^']*'|[^\s,;&}]+)`)
	// AWS access key ids, and bearer tokens.
	awsKeyID = regexp.MustCompile(`\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{12,}\b`)
	bearer   = regexp.MustCompile(`(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}`)
	// A run of 32 or more characters of base64 or hex with letters and digits mixed.
	longToken = regexp.MustCompile(`[A-Za-z0-9+/=_-]{32,}`)
)

// String replaces the values in s that look like secrets: key-like fields (secret, token,
// password, key, ...) and their values, AWS access key ids, bearer tokens, and long runs of
// base64 or hex.
func String(s string) string {
	s = secretField.ReplaceAllString(s, "${1}"+Redacted)
	s = awsKeyID.ReplaceAllString(s, Redacted)
	s = bearer.ReplaceAllString(s, "${1} "+Redacted)
	return longToken.ReplaceAllStringFunc(s, func(t string) string {
		if strings.ContainsAny(t, "0123456789") && strings.IndexFunc(t, isLetter) >= 0 {
			return Redacted
		}
		return t
	})
}

func isLetter(r rune) bool { return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' }

// Argv is argv as an event or an error may show it.
func Argv(argv []string) []string {
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = String(a)
	}
	return out
}

// FirstLine is the first non-empty line of s, at most 200 bytes, redacted.
func FirstLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			if len(l) > 200 {
				l = l[:200] + "..."
			}
			return String(l)
		}
	}
	return ""
}

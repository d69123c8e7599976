package testenv

import (
	"strings"
)

// DetachFUSECopies is a shell command for the first line of a script that runs in a new
// mount namespace (unshare --mount): it lazily detaches the namespace's copies of the FUSE
// mounts that existed when the namespace was made, except those at or beneath a keep path
// (the mounts the namespace is there to use).
//
// Why: this machine's mounts are private (mountinfo shows no shared peer groups), so a new
// mount namespace holds a copy of every mount and no unmount on the host ever reaches it.
// A copy of another test's FUSE mount keeps that mount's connection open: its FUSE server
// does not exit when the test, or sandboxd releasing the mount, unmounts it on the host,
// until the namespace ends. `go test ./...` runs packages side by side, so a namespace
// made by one package's test must not hold on to another's mounts.
func DetachFUSECopies(keep ...string) string {
	esc := make([]string, 0, len(keep))
	for _, k := range keep {
		esc = append(esc, mountinfoEscape(strings.TrimRight(k, "/")))
	}
	// Field 5 of mountinfo is the mount point (octal-escaped), the field after "-" the
	// filesystem type. umount -c: no canonicalizing stat, which a hung mount would block.
	const prog = `
function unesc(s,  out) {
	out = ""
	while (match(s, /\\[0-7][0-7][0-7]/)) {
		out = out substr(s, 1, RSTART-1) sprintf("%c", substr(s, RSTART+1, 1)*64 + substr(s, RSTART+2, 1)*8 + substr(s, RSTART+3, 1))
		s = substr(s, RSTART+4)
	}
	return out s
}
BEGIN { n = split(ENVIRON["SANDBOXD_TEST_KEEP"], keep, "\n") }
{
	t = ""
	for (i = 7; i <= NF; i++) if ($i == "-") { t = $(i+1); break }
	if (t !~ /^fuse/ || t == "fusectl") next
	for (j = 1; j <= n; j++) if (keep[j] != "" && ($5 == keep[j] || index($5, keep[j] "/") == 1)) next
	print unesc($5)
}`
	return "SANDBOXD_TEST_KEEP=" + shellQuote(strings.Join(esc, "\n")) + " awk " + shellQuote(prog) +
		" /proc/self/mountinfo | sort -r | while IFS= read -r m; do umount -l -c \"$m\" 2>/dev/null || true; done"
}

// mountinfoEscape writes a path as /proc/self/mountinfo shows it.
func mountinfoEscape(p string) string {
	return strings.NewReplacer(`\`, `\134`, " ", `\040`, "\t", `\011`, "\n", `\012`).Replace(p)
}

// shellQuote quotes s for sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Command manpage writes sandboxd(1) from the help the sandboxd binary prints, so the
// manual page cannot drift from the CLI: the top-level help becomes the description,
// and every command it lists gets a section with that command's own --help.
//
//	go run ./packaging/debian/manpage BINARY VERSION > sandboxd.1
package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: manpage BINARY VERSION")
		os.Exit(64)
	}
	page, err := render(os.Args[1], os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, "manpage:", err)
		os.Exit(1)
	}
	os.Stdout.WriteString(page)
}

// commandLine is a line of the "Commands:" list: two spaces, the name, two or more spaces.
var commandLine = regexp.MustCompile(`^  ([a-z][a-z0-9-]*)\s{2,}\S`)

func render(bin, version string) (string, error) {
	top, err := help(bin, "--help")
	if err != nil {
		return "", err
	}
	lines := strings.Split(strings.TrimRight(top, "\n"), "\n")
	summary := ""
	var commands []string
	inCommands := false
	for _, l := range lines {
		switch {
		case summary == "" && l != "" && !strings.HasPrefix(l, "Usage:"):
			summary = strings.TrimSuffix(l, ".")
		case l == "Commands:":
			inCommands = true
		case inCommands && l == "":
			inCommands = false
		case inCommands:
			if m := commandLine.FindStringSubmatch(l); m != nil && m[1] != "help" {
				commands = append(commands, m[1])
			}
		}
	}
	if summary == "" || len(commands) == 0 {
		return "", fmt.Errorf("%s --help: no summary line or no Commands: list in\n%s", bin, top)
	}
	var b strings.Builder
	fmt.Fprintf(&b, ".TH SANDBOXD 1 %q %q \"User Commands\"\n", date(), "sandboxd "+version)
	b.WriteString(".SH NAME\n")
	fmt.Fprintf(&b, "sandboxd \\- %s\n", escape(lowerFirst(summary)))
	b.WriteString(".SH SYNOPSIS\n.B sandboxd\n.I COMMAND\n.RI [ flags ]\n")
	b.WriteString(".SH DESCRIPTION\n")
	verbatim(&b, top)
	b.WriteString(".SH COMMANDS\n")
	for _, c := range commands {
		h, err := help(bin, c, "--help")
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, ".SS %q\n", "sandboxd "+c)
		verbatim(&b, h)
	}
	b.WriteString(`.SH FILES
.TP
.I /etc/sandboxd/sandboxd.toml
the config file; \fBsandboxd config default\fR prints every key with its default
.TP
.I /etc/default/sandboxd
extra arguments for \fBsandboxd serve\fR under systemd (ARGS=)
.TP
.I /run/sandboxd/sandboxd.sock
the API socket
.TP
.I /var/lib/sandboxd
state: cooldowns, first\-seen pids, the reserve file
.SH SEE ALSO
.BR systemctl (1),
.BR journalctl (1);
/usr/share/doc/sandboxd/ (operations.md, config.md, api.md)
`)
	return b.String(), nil
}

// help runs the binary and returns what it prints; help goes to stdout with exit 0.
func help(bin string, args ...string) (string, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "SANDBOXD_SOCKET=/run/sandboxd/sandboxd.sock")
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", bin, strings.Join(args, " "), err)
	}
	return string(out), nil
}

// verbatim writes text unfilled, as the terminal shows it.
func verbatim(b *strings.Builder, text string) {
	b.WriteString(".nf\n")
	sc := bufio.NewScanner(strings.NewReader(strings.TrimRight(text, "\n")))
	for sc.Scan() {
		if sc.Text() == "" {
			b.WriteString("\n")
			continue
		}
		b.WriteString(escape(sc.Text()) + "\n")
	}
	b.WriteString(".fi\n")
}

// escape makes a line safe as roff text: backslashes and minus signs escaped, and a
// leading dot or quote kept from being read as a request.
func escape(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	s = strings.ReplaceAll(s, "-", `\-`)
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	return s
}

func lowerFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToLower(s[:1]) + s[1:]
}

// date is SOURCE_DATE_EPOCH's day when set (reproducible builds), else today.
func date() string {
	t := time.Now().UTC()
	if e, err := strconv.ParseInt(os.Getenv("SOURCE_DATE_EPOCH"), 10, 64); err == nil {
		t = time.Unix(e, 0).UTC()
	}
	return t.Format("2006-01-02")
}

package main

import (
	"bytes"
	"context"
	"flag"
	"reflect"
	"strings"
	"testing"
)

// TestTableEntryGetsParsingAndHelp: a command with subcommands, a default, positional
// arguments and its own flags — the shape of jobs and run (issues 11, 12) — is one table
// entry, and global flags, help, usage errors and "--" work for it with no other code.
func TestTableEntryGetsParsingAndHelp(t *testing.T) {
	type call struct {
		cmd  string
		args []string
		json bool
		sock string
		wait bool
	}
	var got call
	record := func(name string, wait *bool) runFunc {
		return func(ctx context.Context, inv *invocation) int {
			got = call{name, inv.args, inv.g.json, inv.g.socket, wait != nil && *wait}
			return 0
		}
	}
	root := &command{name: "sandboxd", summary: "test", subs: []*command{
		{name: "jobs", summary: "the job registry", deflt: "list", subs: []*command{
			{name: "list", summary: "list jobs", globals: gClient, run: record("list", nil)},
			{name: "end", summary: "end a job", args: "ID", minArgs: 1, maxArgs: 1, globals: gClient,
				setup: func(fs *flag.FlagSet) runFunc { return record("end", fs.Bool("wait", true, "wait until it is gone")) }},
		}},
		{name: "run", summary: "run a command as a job", args: "[--] CMD [ARG...]", minArgs: 1, maxArgs: -1, rawArgs: true,
			globals: gClient, setup: func(fs *flag.FlagSet) runFunc { fs.String("id", "", "the job `ID`"); return record("run", nil) }},
	}}
	rows := []struct {
		args []string
		code int
		want call
	}{
		{[]string{"jobs"}, 0, call{cmd: "list"}},
		{[]string{"--json", "jobs"}, 0, call{cmd: "list", json: true}},
		{[]string{"jobs", "--socket=/s", "list"}, 0, call{cmd: "list", sock: "/s"}},
		{[]string{"jobs", "end", "a1", "--json"}, 0, call{cmd: "end", args: []string{"a1"}, json: true, wait: true}},
		{[]string{"--socket", "/s", "jobs", "end", "--wait=false", "a1"}, 0, call{cmd: "end", args: []string{"a1"}, sock: "/s"}},
		{[]string{"run", "--id", "x", "--", "sh", "-c", "echo --json"}, 0, call{cmd: "run", args: []string{"sh", "-c", "echo --json"}}},
		{[]string{"run", "--json", "sleep", "10", "--json"}, 0, call{cmd: "run", args: []string{"sleep", "10", "--json"}, json: true}},
		{[]string{"jobs", "end"}, 64, call{}},
		{[]string{"jobs", "end", "a", "b"}, 64, call{}},
		{[]string{"jobs", "ned", "a"}, 64, call{}},
		{[]string{"run"}, 64, call{}},
	}
	for _, row := range rows {
		got = call{}
		var out, errb bytes.Buffer
		code := dispatch(root, row.args, &out, &errb)
		if code != row.code || !reflect.DeepEqual(got, row.want) {
			t.Errorf("sandboxd %s: exit %d, ran %+v; want %d, %+v (stderr %q)", strings.Join(row.args, " "), code, got, row.code, row.want, errb.String())
		}
	}
	var out, errb bytes.Buffer
	dispatch(root, []string{"jobs", "ned"}, &out, &errb)
	if !strings.Contains(errb.String(), "sandboxd jobs end") {
		t.Errorf("no did-you-mean for a mistyped subcommand: %q", errb.String())
	}
	for _, args := range [][]string{{"jobs", "end", "--help"}, {"jobs", "--help"}, {"run", "--help"}} {
		out.Reset()
		if code := dispatch(root, args, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "Usage: sandboxd "+strings.Join(args[:len(args)-1], " ")) {
			t.Errorf("sandboxd %v: exit %d\n%s", args, code, out.String())
		}
	}
	out.Reset()
	dispatch(root, []string{"jobs", "end", "--help"}, &out, &errb)
	for _, want := range []string{"Usage: sandboxd jobs end [flags] ID", "--wait", "--socket PATH", "--json"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("jobs end --help lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	dispatch(root, []string{"jobs", "--help"}, &out, &errb)
	if !strings.Contains(out.String(), "list       list jobs (the default)") {
		t.Errorf("jobs --help does not name its default:\n%s", out.String())
	}
}

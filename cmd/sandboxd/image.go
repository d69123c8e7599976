package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/e2image"
)

// Exit statuses of `sandboxd image` beyond 0 (CONTRACT §13 names the commands; these are
// documented in docs/api.md).
const (
	exitImageNothing = 12 // recover: no reserve inside, nothing freed (as `sandboxd boot`)
	exitImageData    = 65 // not an ext2/3/4 image
	exitImageTools   = 69 // e2fsprogs is not installed
	exitImageInUse   = 75 // in use: a lock, an open fd, a loop device; stop the VM and retry
)

// reservePaths is a repeatable --reserve-path flag.
type reservePaths []string

func (r *reservePaths) String() string     { return strings.Join(*r, ",") }
func (r *reservePaths) Set(s string) error { *r = append(*r, s); return nil }

// imageCommand is `sandboxd image check|recover IMAGE`: a stopped VM's ext4 disk image,
// from the host, through e2fsprogs (the VMM's pre-start hook).
func imageCommand() *command {
	return &command{name: "image", summary: "a stopped VM's ext4 disk image, from the host: check it, or free its reserve so it boots",
		subs: []*command{
			{name: "check", summary: "read-only: free blocks and inodes, the journal's state, the sandboxd reserve inside",
				args: "IMAGE", minArgs: 1, maxArgs: 1, globals: gJSON,
				long: "Needs e2fsprogs (dumpe2fs, debugfs); changes nothing. Exit 0; 65 for a file that is not an ext2/3/4 image; 69 without e2fsprogs.",
				setup: func(fs *flag.FlagSet) runFunc {
					var paths reservePaths
					fs.Var(&paths, "reserve-path", "where the reserve lies inside the image, `PATH` (repeatable; default "+strings.Join(e2image.DefaultReservePaths, " and ")+")")
					return func(ctx context.Context, inv *invocation) int {
						tools, err := e2image.Find()
						if err != nil {
							fmt.Fprintf(inv.stderr, "sandboxd image check: %v\n", err)
							return exitImageTools
						}
						rep, err := tools.Check(ctx, inv.args[0], paths)
						if err != nil {
							return imageFailure(inv, "check", err)
						}
						if inv.g.json {
							printJSON(inv.stdout, rep)
						} else {
							fmt.Fprintln(inv.stdout, rep.Line)
						}
						return exitOK
					}
				}},
			{name: "recover", summary: "replay the journal and remove the sandboxd reserve inside a stopped VM's image, so it boots",
				args: "IMAGE", minArgs: 1, maxArgs: 1, globals: gJSON,
				long: `Run it from the VMM's pre-start hook, or by hand, on the image of a stopped VM. It refuses an
image in use (a lock held on it, a process with it open, a loop device it backs), replays the
journal (e2fsck -E journal_only), removes the sandboxd reserve inside (debugfs -w), and says
what it freed. Without a reserve it frees nothing and says what it would take and which
setting sizes the disk. Exit 0: freed; 12: no reserve inside, nothing freed; 65: not an
ext2/3/4 image; 69: e2fsprogs missing; 75: the image is in use (stop the VM); 1: a tool failed.`,
				setup: func(fs *flag.FlagSet) runFunc {
					var paths reservePaths
					fs.Var(&paths, "reserve-path", "where the reserve lies inside the image, `PATH` (repeatable; default "+strings.Join(e2image.DefaultReservePaths, " and ")+")")
					setting := fs.String("size-setting", "", "what sizes this VM's disk, `TEXT` named in the answer, e.g. \"[openshell.drivers.vm] overlay_disk_mib\"")
					needS := fs.String("need", "64MiB", "the room the VM needs to boot, `SIZE`: without a reserve, the answer says how far short it is")
					return func(ctx context.Context, inv *invocation) int {
						need, err := api.ParseSize(*needS)
						if err != nil {
							return inv.usageErr("--need: %v", err)
						}
						tools, err := e2image.Find()
						if err != nil {
							fmt.Fprintf(inv.stderr, "sandboxd image recover: %v\n", err)
							return exitImageTools
						}
						rec, err := tools.Recover(ctx, inv.args[0], paths, uint64(need), *setting, "/proc", "/sys")
						if err != nil {
							return imageFailure(inv, "recover", err)
						}
						if inv.g.json {
							printJSON(inv.stdout, rec)
						} else {
							fmt.Fprintln(inv.stdout, rec.Line)
						}
						if rec.NothingToFree {
							return exitImageNothing
						}
						return exitOK
					}
				}},
		}}
}

func imageFailure(inv *invocation, verb string, err error) int {
	code := 1
	switch {
	case errors.Is(err, e2image.ErrInUse):
		code = exitImageInUse
	case errors.Is(err, e2image.ErrNotExt4):
		code = exitImageData
	}
	if inv.g.json {
		printJSON(inv.stdout, map[string]any{"error": err.Error(), "exit": code})
	} else {
		fmt.Fprintf(inv.stderr, "sandboxd image %s: %v\n", verb, err)
	}
	return code
}

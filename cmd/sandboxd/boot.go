package main

import (
	"context"
	"fmt"
	"time"

	"github.com/sandboxd/sandboxd/daemon"
	"github.com/sandboxd/sandboxd/internal/config"
)

// bootCommand is `sandboxd boot` (CONTRACT §13): the check guest init and the early unit
// run before anything writes to the watched filesystems. No daemon, no socket.
func bootCommand() *command {
	return &command{name: "boot", summary: "early-boot check: release the reserve of a full filesystem so the sandbox boots (no daemon)",
		globals: gConfig | gJSON, maxArgs: 0,
		long: `Run it before anything writes to the watched filesystems (guest init before it builds the
overlay root; the packaged sandboxd-boot.service on hosts with systemd). It needs no daemon and
writes nothing before it has freed room. A filesystem below replace_below gets its reserve file
released and one line naming the cause and the size setting, e.g.
  / full: 0 B free of 1.0 GiB (sized by [openshell.drivers.vm] overlay_disk_mib); released the 256.0 MiB reserve; booting in recovery mode: download or remove files
and a marker in the state dir, which the daemon turns into the condition BootedFull.
Exit 0: nothing to do; 11: booted on the released reserve (recovery mode: read, download
and remove files; launches are refused until there is room); 12: full with no reserve to
release (grow the disk, or stop the VM and run ` + "`sandboxd image recover IMAGE`" + ` on the host);
78: the config file is invalid.`,
		run: func(ctx context.Context, inv *invocation) int {
			cfg, err := config.LoadOrDefault(inv.g.config)
			if err != nil {
				fmt.Fprintf(inv.stderr, "sandboxd boot: %v\n", err)
				return exitConfig
			}
			rep := daemon.Boot(cfg, "/proc", time.Now())
			if inv.g.json {
				printJSON(inv.stdout, rep)
				return rep.Exit
			}
			for _, l := range rep.Lines {
				fmt.Fprintln(inv.stdout, "sandboxd boot: "+l)
			}
			if rep.MarkerError != "" {
				fmt.Fprintf(inv.stderr, "sandboxd boot: the marker for BootedFull was not written: %s\n", rep.MarkerError)
			}
			return rep.Exit
		}}
}

package daemon

import (
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/internal/state"
	"github.com/sandboxd/sandboxd/reclaim"
)

// The exit statuses of `sandboxd boot` (CONTRACT §13), for init scripts to branch on.
const (
	BootExitOK        = 0  // nothing to do: every watched filesystem is above replace_below
	BootExitOnReserve = 11 // booted on the released reserve: recovery mode, read and remove files
	BootExitNoReserve = 12 // full and no reserve to release: grow the disk or recover from the host
)

// bootMarker is the state document `sandboxd boot` leaves after it released a reserve: the
// daemon turns it into the condition BootedFull at start.
const bootMarker = "booted-full.json"

// BootReport is what `sandboxd boot` found and did.
type BootReport struct {
	Exit        int              `json:"exit"`
	Lines       []string         `json:"lines"`
	Filesystems []BootFilesystem `json:"filesystems"`
	// Marker is the marker document written in the state dir ("" when none was needed
	// or it could not be written: MarkerError says why).
	Marker      string `json:"marker,omitempty"`
	MarkerError string `json:"marker_error,omitempty"`
}

// BootFilesystem is one watched filesystem as the boot check saw it.
type BootFilesystem struct {
	Path          string `json:"path"`
	SizeBytes     uint64 `json:"size_bytes"`
	AvailBytes    uint64 `json:"avail_bytes"`
	Files         uint64 `json:"files"`
	FilesFree     uint64 `json:"files_free"`
	ReplaceBytes  uint64 `json:"replace_threshold_bytes"`
	ReplaceFiles  uint64 `json:"replace_threshold_inodes"`
	SizeSetting   string `json:"size_setting,omitempty"`
	Cause         string `json:"cause,omitempty"` // "" when above replace_below*
	ReservePath   string `json:"reserve_path,omitempty"`
	ReleasedBytes int64  `json:"released_bytes"`
	Line          string `json:"line"`
	Error         string `json:"error,omitempty"`
}

// bootDoc is the marker: the filesystems `sandboxd boot` found full, keyed by their
// configured path, with the line it printed. An empty map is a cleared marker.
type bootDoc struct {
	At          time.Time                `json:"at"`
	Filesystems map[string]bootMarkEntry `json:"filesystems"`
}

type bootMarkEntry struct {
	Line          string `json:"line"`
	ReleasedBytes int64  `json:"released_bytes"`
	SizeSetting   string `json:"size_setting,omitempty"`
}

// Boot is `sandboxd boot`: the check guest init (or an early unit) runs before anything
// writes to the watched filesystems. It needs no daemon and writes nothing before it has
// freed room: every filesystem below replace_below* gets its reserve file released and
// one line naming the cause and the size setting; after that (and only then) the marker
// and the reserve's released state go to the state dir. Observe mode changes nothing
// and says what it would do.
func Boot(cfg *config.Config, procRoot string, now time.Time) BootReport {
	rep := BootReport{Exit: BootExitOK}
	var mountpoints []string
	marks := map[string]bootMarkEntry{}
	observe := cfg.Server.Mode == api.ModeObserve
	var store *state.Store
	if st, err := os.Stat(cfg.Server.StateDir); err == nil && st.IsDir() {
		store = state.Open(cfg.Server.StateDir) // an existing dir: opening it writes nothing
	}
	for i, f := range cfg.Filesystems {
		// A reserve released before (by an earlier boot, a stop, a writer) and not re-armed:
		// its room is not the workload's, so this boot too is in recovery mode.
		var released uint64
		var releasedWhy string
		if store != nil && f.Reserve > 0 {
			if rel, why := reclaim.ReleasedOnRecord(store, f.Path); rel {
				released, releasedWhy = uint64(f.Reserve), why
			}
		}
		b := bootMeasure(f, released)
		if b.Error != "" || b.Cause == "" {
			rep.Filesystems = append(rep.Filesystems, b)
			continue
		}
		if mountpoints == nil {
			mountpoints = reclaim.MountPoints(procRoot)
		}
		fig := fmt.Sprintf("%s: %s free of %s", b.Cause, api.FormatSize(b.AvailBytes), api.FormatSize(b.SizeBytes))
		if released > 0 && b.AvailBytes > 0 {
			fig += fmt.Sprintf(" (%s of it the released reserve)", api.FormatSize(min(released, b.AvailBytes)))
		}
		if b.Files > 0 && (b.FilesFree == 0 || b.FilesFree < b.ReplaceFiles) {
			fig += fmt.Sprintf(", %s of %s inodes", api.FormatCount(b.FilesFree), api.FormatCount(b.Files))
		}
		fig += " (" + sizeSettingWords(b.SizeSetting) + ")"
		if f.Reserve > 0 {
			b.ReservePath = reservePath(cfg, i, mountpoints)
		}
		held := int64(0)
		if b.ReservePath != "" {
			held = reclaim.ReserveHeld(b.ReservePath)
		}
		switch {
		case held == 0 && released > 0:
			b.Line = fmt.Sprintf("%s; the %s reserve was released before and is not re-armed (%s); booting in recovery mode: download or remove files",
				fig, api.FormatSize(released), releasedWhy)
			marks[f.Path] = bootMarkEntry{Line: b.Line, SizeSetting: b.SizeSetting}
			rep.Exit = max(rep.Exit, BootExitOnReserve)
		case held > 0 && observe:
			b.Line = fmt.Sprintf("%s; observe mode: would release the %s reserve %s; nothing was changed", fig, api.FormatSize(uint64(held)), b.ReservePath)
			rep.Exit = max(rep.Exit, BootExitNoReserve)
		case held > 0:
			freed, err := reclaim.ReleaseReserveFile(b.ReservePath)
			if err != nil {
				b.Error = err.Error()
				b.Line = fmt.Sprintf("%s; releasing the reserve failed: %v; %s", fig, err, noReserveAdvice(b.SizeSetting))
				rep.Exit = max(rep.Exit, BootExitNoReserve)
				break
			}
			b.ReleasedBytes = freed
			b.Line = fmt.Sprintf("%s; released the %s reserve; booting in recovery mode: download or remove files", fig, api.FormatSize(uint64(freed)))
			marks[f.Path] = bootMarkEntry{Line: b.Line, ReleasedBytes: freed, SizeSetting: b.SizeSetting}
			rep.Exit = max(rep.Exit, BootExitOnReserve)
		default:
			why := "no reserve is configured (reserve = \"0\")"
			if b.ReservePath != "" {
				why = "no reserve file at " + b.ReservePath + " (released before, or never written)"
			}
			b.Line = fmt.Sprintf("%s; %s; %s", fig, why, noReserveAdvice(b.SizeSetting))
			rep.Exit = max(rep.Exit, BootExitNoReserve)
		}
		rep.Filesystems = append(rep.Filesystems, b)
	}
	// Room is freed (or there was none to free): only now is anything written.
	if len(marks) > 0 {
		if store == nil {
			store = state.Open(cfg.Server.StateDir)
		}
		for fs, m := range marks {
			if m.ReleasedBytes == 0 {
				continue // released before: already on record
			}
			if err := reclaim.RecordReleased(store, fs, "released by `sandboxd boot`: "+m.Line, now); err != nil && rep.MarkerError == "" {
				rep.MarkerError = err.Error()
			}
		}
		if err := store.Save(bootMarker, bootDoc{At: now, Filesystems: marks}); err != nil {
			rep.MarkerError = err.Error()
		} else if rep.MarkerError == "" {
			rep.Marker = store.Dir() + "/" + bootMarker
		}
	}
	for _, b := range rep.Filesystems {
		switch {
		case b.Error != "" && b.Line == "":
			rep.Lines = append(rep.Lines, fmt.Sprintf("%s: not checked: %s", b.Path, b.Error))
		case b.Line != "":
			rep.Lines = append(rep.Lines, b.Line)
		}
	}
	if rep.Exit == BootExitOK {
		var ok []string
		for _, b := range rep.Filesystems {
			if b.Error == "" {
				ok = append(ok, fmt.Sprintf("%s has %s free of %s", b.Path, api.FormatSize(b.AvailBytes), api.FormatSize(b.SizeBytes)))
			}
		}
		if len(ok) > 0 {
			rep.Lines = append([]string{strings.Join(ok, "; ") + ": above replace_below, nothing to do"}, rep.Lines...)
		}
		if len(rep.Lines) == 0 {
			rep.Lines = []string{"no filesystem is watched: nothing to do"}
		}
	}
	return rep
}

// bootMeasure is one statfs of the filesystem f and its replace thresholds, resolved on
// the size as the daemon resolves them (the adaptive threshold needs a growth rate: none
// at boot, and it only ever raises the reclaim threshold, not replace_below).
//
// released is the room of a reserve released before: not the workload's, counted out.
func bootMeasure(f config.Filesystem, released uint64) BootFilesystem {
	b := BootFilesystem{Path: f.Path, SizeSetting: f.SizeSetting}
	var st unix.Statfs_t
	if err := unix.Statfs(f.Path, &st); err != nil {
		b.Error = fmt.Sprintf("statfs %s: %v", f.Path, err)
		return b
	}
	bs := uint64(st.Frsize)
	if bs == 0 {
		bs = uint64(st.Bsize)
	}
	b.SizeBytes, b.AvailBytes = st.Blocks*bs, st.Bavail*bs
	b.Files, b.FilesFree = st.Files, st.Ffree
	b.ReplaceBytes = f.ReplaceBelow.Resolve(b.SizeBytes)
	if b.Files > 0 {
		b.ReplaceFiles = f.ReplaceBelowInodes.Resolve(b.Files)
	}
	avail := b.AvailBytes - min(released, b.AvailBytes)
	switch {
	case b.SizeBytes == 0:
		// No capacity reported (a pseudo filesystem): byte thresholds do not apply.
	case avail == 0:
		b.Cause = f.Path + " full"
	case b.Files > 0 && b.FilesFree == 0:
		b.Cause = f.Path + " out of inodes"
	case avail < b.ReplaceBytes:
		b.Cause = fmt.Sprintf("%s below filesystem.replace_below %s", f.Path, api.FormatSize(b.ReplaceBytes))
	case b.Files > 0 && b.FilesFree < b.ReplaceFiles:
		b.Cause = fmt.Sprintf("%s below filesystem.replace_below_inodes %s", f.Path, api.FormatCount(b.ReplaceFiles))
	}
	return b
}

func sizeSettingWords(setting string) string {
	if setting == "" {
		return "what sizes this disk is not named: set [[filesystem]] size_setting"
	}
	return "sized by " + setting
}

func noReserveAdvice(setting string) string {
	grow := "grow the disk"
	if setting != "" {
		grow = "grow the disk (" + setting + ")"
	}
	return grow + ", or stop the VM and free its image from the host with `sandboxd image recover IMAGE`"
}

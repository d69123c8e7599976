package reclaim

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/state"
)

// ReleaseReserveFile removes the reserve file at path with no Reclaimer running (`sandboxd
// boot`): a regular file only, beneath its directory's safely walked fd, never through a
// link. It returns what the file held on disk (0 and no error when there is none).
func ReleaseReserveFile(path string) (int64, error) {
	held := allocated(path)
	if held == 0 {
		return 0, nil
	}
	if err := removeReserve(path); err != nil {
		return 0, fmt.Errorf("release reserve %s: %w", path, err)
	}
	return held, nil
}

// ReserveHeld is what the reserve file at path holds on disk (0 when absent).
func ReserveHeld(path string) int64 { return allocated(path) }

// RecordReleased writes into the reclaim state document of store that the reserve of the
// filesystem fs was released, and why: the daemon that starts next reads it, raises
// ReserveReleased with the reason and does not count the room as the workload's until it
// re-arms the file. Called only after the room was freed (a full disk takes no write).
func RecordReleased(store *state.Store, fs, reason string, at time.Time) error {
	var s rateState
	if err := store.Load(stateDoc, &s); err != nil {
		return err
	}
	if s.Reserves == nil {
		s.Reserves = map[string]reserveDoc{}
	}
	s.Reserves[fs] = reserveDoc{Released: true, Since: at, Reason: reason}
	return store.Save(stateDoc, s)
}

// ReleasedOnRecord says whether the reclaim state document of store records the reserve of
// fs as released (and why): read only, for `sandboxd boot`, whose second boot after a
// release must still count the room out.
func ReleasedOnRecord(store *state.Store, fs string) (bool, string) {
	var s rateState
	if store.Load(stateDoc, &s) != nil {
		return false, ""
	}
	d := s.Reserves[fs]
	return d.Released, d.Reason
}

// ReleasedMarker is the file left next to a reserve released while no daemon ran on its
// filesystem (`sandboxd image recover`, inside a stopped VM's image, where the guest's
// state dir may not be): its text says who released it and why. The daemon that starts
// counts the room out as it does for a release it made, raises BootedFull with the text,
// and removes the marker when it re-arms the reserve.
func ReleasedMarker(reservePath string) string { return reservePath + ".released" }

// ReadReleasedMarker is the marker's text, false when there is none (a regular file only;
// at most 4 KiB are read).
func ReadReleasedMarker(reservePath string) (string, bool) {
	p := ReleasedMarker(reservePath)
	var st unixStat
	if !regularFile(p, &st) {
		return "", false
	}
	f, err := os.Open(p)
	if err != nil {
		return "", false
	}
	defer f.Close()
	b := make([]byte, 4096)
	n, _ := f.Read(b)
	return strings.TrimSpace(string(b[:n])), true
}

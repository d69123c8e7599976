package reclaim

import (
	"fmt"
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

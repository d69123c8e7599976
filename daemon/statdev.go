package daemon

import (
	"errors"
	"io/fs"
	"syscall"
)

func statDevSys(fi fs.FileInfo, out *syscallStat) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return errors.New("no stat_t")
	}
	out.dev = uint64(st.Dev)
	return nil
}

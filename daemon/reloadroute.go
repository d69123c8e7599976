package daemon

import (
	"errors"
	"net/http"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/config"
)

// handleConfigReload runs the same reload as SIGHUP and answers with its outcome, so
// that the unit's ExecReload (`sandboxd config reload`) makes `systemctl reload` fail on
// a rejected file (issue 25: it used to exit 0 while the daemon logged the rejection).
// 200 either way: the reload ran; Reloaded says whether the file was taken.
func (d *Daemon) handleConfigReload(w http.ResponseWriter, r *http.Request) error {
	res := api.ConfigReload{File: d.opts.ConfigPath, Reloaded: true, Problems: []string{}}
	if err := d.Reload(); err != nil {
		res.Reloaded = false
		var ve *config.ValidationError
		if errors.As(err, &ve) {
			for _, p := range ve.Problems {
				res.Problems = append(res.Problems, p.Error())
			}
		} else {
			res.Problems = append(res.Problems, err.Error())
		}
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

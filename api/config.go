package api

// ConfigView is the body of GET /v1/config.
type ConfigView struct {
	// TOML is the effective config file (what `sandboxd config show` prints).
	TOML string `json:"toml"`
	// InForce holds the values that a zero could be mistaken for "unset" in, read back
	// from the running components ("health.transition_period": "0s"): what runs, not
	// what the file says.
	InForce map[string]any `json:"in_force"`
}

// RouteConfigReload re-reads the config file as SIGHUP does and answers with the result
// (issue 25): the unit's ExecReload runs `sandboxd config reload`, so `systemctl reload`
// fails when the file is rejected instead of reporting success.
const RouteConfigReload = "POST /v1/config/reload"

// ConfigReload is the body of POST /v1/config/reload: 200 whether or not the file was
// taken, since the reload ran either way; Reloaded false means it was rejected, the last
// good config stays, and Problems says why (one line each, with key and line).
type ConfigReload struct {
	File     string   `json:"file"`
	Reloaded bool     `json:"reloaded"`
	Problems []string `json:"problems"`
}

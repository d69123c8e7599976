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

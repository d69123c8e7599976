package api

import "strings"

// ReclaimThresholdName names the reclaim threshold in force with its value, as messages
// say it: "filesystem.reclaim_below 1.5 GiB" while the configured value is in force,
// "the adaptive reclaim threshold 10.0 GiB (growth 26.1 MiB/s × lead_time 10m, capped
// at 10.0 GiB)" while growth has raised it. Naming the key with the adaptive value
// ("filesystem.reclaim_below (10.0 GiB)" with 1.5GiB configured) sent readers to a
// setting that says something else.
func (fs Filesystem) ReclaimThresholdName() string {
	v := FormatSize(fs.ReclaimThresholdBytes)
	why := fs.ReclaimThresholdWhy
	if why == "" || strings.HasPrefix(why, "reclaim_below") {
		return "filesystem.reclaim_below " + v
	}
	return "the adaptive reclaim threshold " + v + " (" + why + ")"
}

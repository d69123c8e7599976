// Package reclaim owns sandboxd's self-heal ladder (CONTRACT §6): it knows the regenerable
// caches of the box (declared [[reclaim.cache]] roots, caches discovered under the homes,
// apt's archives), and when a watched filesystem is below its reclaim threshold it frees
// space cheapest-to-regenerate first — expired site entries, the tools' own garbage
// collection, cache entries oldest first, whole caches — re-measuring with statfs after
// every step and stopping at the threshold plus headroom. It answers a verdict (healthy,
// reclaimed, replace) with a fingerprint line a person can act on, rate-limits automatic
// runs (cooldown, runs per hour, persisted), and keeps the emergency reserve file.
//
// Every deletion goes through internal/safefs (beneath a root fd, no symlinks, no mount
// crossing); a directory entry is renamed into a trash directory inside its own cache root
// before it is deleted, so a deadline or a crash never leaves a half-deleted entry where a
// tool would find it.
package reclaim

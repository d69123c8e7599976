// Package jobs owns the job registry of CONTRACT §11: every job a runner registers is held
// in a cgroup v2 of its own (<cgroup root>/jobs/<id>), so whatever it forks — through
// setsid or a double fork too — stays the job's; a lease (ttl, renewed by heartbeats) and a
// hard cap (max_lifetime) are measured on CLOCK_BOOTTIME; the dead-man switch ends a job
// whose lease lapsed: SIGTERM to every process, SIGKILL through cgroup.kill after the
// grace period (freeze, kill, thaw where the kernel has no cgroup.kill), then it waits for
// cgroup.events to say "populated 0" before it removes the cgroup. The registry is kept in
// the state directory, so a restarted daemon finds every job again and keeps its lease.
// The leak check lists what escaped all that, loudly.
//
// The package imports no other capability: the sites it reads pid files from and the
// callbacks that want to hear of a job's end are handed in through Options.
package jobs

// Package backtest runs sandboxd's real pressure and reclaim-decision code on a series of
// filesystem samples with a simulated clock: no daemon, no statfs, nothing on disk. It is
// the engine behind `sandboxd backtest` (a recorded series: how would this policy have
// behaved?), the trace-corpus test of the growth estimator, and the fleet simulator.
//
// # Driving it
//
//	e := backtest.New(backtest.Config{Filesystem: fs, Pressure: po, Headroom: 256 << 20})
//	for each sample, in time order:
//		for _, ev := range e.Step(t, backtest.Sample{AvailBytes: a, SizeBytes: s}) {
//			// ev.Kind: ConditionRaised / ConditionCleared (ev.Condition, ev.Reason),
//			// ReclaimStarted (ev.Trigger, ev.Rung, ev.TargetBytes, ev.DeficitBytes),
//			// ReclaimRefused (ev.Blocked: the cooldown or the hourly cap).
//		}
//		st := e.State() // figures, verdict, adaptive-threshold rise, without allocating
//	sum := e.Summary()
//
// Step's events live in a buffer the next Step reuses: copy what you keep. A Step
// allocates nothing unless a condition flips or is true (its message follows the
// figures), so a simulator can drive many engines (one per simulated filesystem; an
// Engine is not safe for concurrent use, distinct engines are independent).
//
// What reclaim would free is not known to the engine (it has no caches): a ReclaimStarted
// event says what the policy would ask for. A driver that models the caches sets
// Config.Ladder, which is called at each start and returns the rung the run would reach
// and the bytes it would free; those bytes are accounted as sandboxd's own free (as the
// daemon's reclaim announces them), and the driver's next sample must show them freed.
// A driver that models sandboxd's own writes (the reserve file) calls OwnWrite.
//
// FromConfig builds a Config from a sandboxd.toml, so an operator tries the very policy
// the daemon would run. The series readers (CSV, Prometheus query_range JSON) and the
// report with lead times against the series' true time to full are in this package too
// (ReadSeries, Run).
package backtest

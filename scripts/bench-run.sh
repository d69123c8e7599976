#!/usr/bin/env bash
# scripts/bench-run.sh — issue 27's figures for `sandboxd run` (docs/benchmarks.md, "Issue 27:
# the per-command path"), on the shipped binary, side by side in one run against one daemon:
#   - whole-process wall time of `sandboxd run -- /bin/true` (CMD spawned straight into its
#     job's cgroup, clone3 CLONE_INTO_CGROUP), of `sandboxd launch`, of the same run forced
#     down the migration path (SANDBOXD_NO_SPAWN_INTO_CGROUP=1: the daemon moves run into
#     the cgroup, as before issue 27), and of `sh -c true`; medians of BENCH_RUN_ROUNDS (21)
#     rounds, interleaved so load hits all alike. Targets: run ≤ 1.5× launch and
#     ≤ launch + 3 ms.
#   - beside them the physical cost run pays on top of launch: a Go program that forks,
#     execs and waits for /bin/true (`sandboxd-bench spawn -- /bin/true`) against the same
#     program that only starts and exits (`sandboxd-bench spawn`); their difference is one
#     exec of /bin/true from a Go program on this machine.
#   - 100 concurrent `sandboxd run -- sleep 1` from one runner: all registered, all ended
#     by themselves, 0 processes left in job cgroups (counts; the wall time is info).
#
# Needs root (the job cgroups), bin/sandboxd (`make build`) and go (sandboxd-bench). Its daemon, cgroups and
# temp dir are removed on exit, also on failure.
set -euo pipefail
[ -n "${EPOCHREALTIME:-}" ] || { echo "bench-run: needs bash 5 (\$EPOCHREALTIME)" >&2; exit 1; }
cd "$(dirname "$0")/.."
ROUNDS=${BENCH_RUN_ROUNDS:-21}
BIN=${BENCH_SANDBOXD:-$PWD/bin/sandboxd} # another build (before/after) with BENCH_SANDBOXD=PATH
[ "$(id -u)" = 0 ] || { echo "bench-run: run as root (job cgroups)" >&2; exit 1; }
[ -x "$BIN" ] || { echo "bench-run: bin/sandboxd missing; run 'make build'" >&2; exit 1; }
GO=${GO:-go}
command -v "$GO" >/dev/null || GO=/usr/local/go/bin/go
WORK=$(mktemp -d /tmp/sandboxd-bench-run.XXXXXX)
CG2=$(awk '$3 == "cgroup2" {print $2; exit}' /proc/mounts)
[ -n "$CG2" ] || { echo "bench-run: no cgroup2 mount" >&2; exit 1; }
CGROOT=$CG2/sandboxd-bench-run-$$
DPID=
cleanup() {
	local rc=$?
	set +e
	if [ -n "$DPID" ]; then kill "$DPID"; wait "$DPID"; fi
	if [ -d "$CGROOT" ]; then
		[ -e "$CGROOT/cgroup.kill" ] && echo 1 >"$CGROOT/cgroup.kill"
		find "$CGROOT" -depth -type d -exec rmdir {} + 2>/dev/null
	fi
	rm -rf "$WORK"
	exit "$rc"
}
trap cleanup EXIT INT TERM
"$GO" build -o "$WORK/sandboxd-bench" ./cmd/sandboxd-bench
SB=$WORK/sandboxd-bench

cat >"$WORK/sandboxd.toml" <<CFG
site = []
[jobs]
cgroup_root = "$CGROOT"
[server]
socket = "$WORK/s.sock"
state_dir = "$WORK/state"
[reclaim]
auto_caches = []
CFG
"$BIN" serve --config "$WORK/sandboxd.toml" --registry-dir "$WORK/registry" 2>"$WORK/daemon.log" &
DPID=$!
export SANDBOXD_SOCKET=$WORK/s.sock
for _ in $(seq 100); do "$BIN" launch >/dev/null 2>&1 && break; sleep 0.1; done
"$BIN" launch >/dev/null || { echo "bench-run: the daemon did not come up: $(cat "$WORK/daemon.log")" >&2; exit 1; }

ms() { echo "scale=3; ($2 - $1) / 1000000" | bc; }
usec() { local t=${1/./}; echo "${t#0}"; } # $EPOCHREALTIME in µs
median() { sort -n | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else printf "%.3f\n", (a[NR/2]+a[NR/2+1])/2}'; }
# timeit: the wall time of one command, in ms. $EPOCHREALTIME (bash 5) is read without a
# fork, so nothing but the command itself is inside the window (a $(date) there would add
# a process start to every figure alike and flatten the ratios).
timeit() {
	local t0 t1
	t0=$EPOCHREALTIME
	"$@" >/dev/null 2>&1 || { echo "bench-run: $* failed" >&2; exit 1; }
	t1=$EPOCHREALTIME
	echo "scale=3; ($(usec "$t1") - $(usec "$t0")) / 1000" | bc
}

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg); kernel $(uname -r); $(nproc) cores; commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
for _ in 1 2 3; do "$BIN" run -- /bin/true; "$BIN" launch >/dev/null; done 2>/dev/null # warm the page cache
for _ in 1 2 3; do "$SB" spawn -- /bin/true; "$SB" spawn; done
run=() launch=() mig=() sh=() gox=() go0=()
for _ in $(seq "$ROUNDS"); do
	launch+=("$(timeit "$BIN" launch)")
	run+=("$(timeit "$BIN" run -- /bin/true)")
	mig+=("$(SANDBOXD_NO_SPAWN_INTO_CGROUP=1 timeit "$BIN" run -- /bin/true)")
	sh+=("$(timeit sh -c true)")
	gox+=("$(timeit "$SB" spawn -- /bin/true)")
	go0+=("$(timeit "$SB" spawn)")
done
mr=$(printf '%s\n' "${run[@]}" | median)
ml=$(printf '%s\n' "${launch[@]}" | median)
mm=$(printf '%s\n' "${mig[@]}" | median)
ms_=$(printf '%s\n' "${sh[@]}" | median)
mgx=$(printf '%s\n' "${gox[@]}" | median)
mg0=$(printf '%s\n' "${go0[@]}" | median)
echo "sandboxd launch:                                   median $ml ms ($ROUNDS runs)"
echo "sandboxd run -- /bin/true (spawned into the cgroup): median $mr ms"
echo "sandboxd run -- /bin/true, migration path (before):  median $mm ms"
echo "sh -c true:                                        median $ms_ ms"
echo "a Go program forking, exec'ing, waiting /bin/true:   median $mgx ms (sandboxd-bench spawn -- /bin/true)"
echo "the same Go program, start and exit only:          median $mg0 ms (sandboxd-bench spawn)"
ratio=$(echo "scale=2; $mr / $ml" | bc)
over=$(echo "scale=2; $mr - $ml" | bc)
v1=$(echo "$mr <= 1.5 * $ml" | bc); v2=$(echo "$mr <= $ml + 3" | bc)
echo "run / launch = ${ratio}x (target <= 1.5x): $([ "$v1" = 1 ] && echo PASS || echo FAIL)"
echo "run - launch = ${over} ms (target <= 3 ms): $([ "$v2" = 1 ] && echo PASS || echo FAIL)"
exe=$(echo "scale=2; $mgx - $mg0" | bc)
echo "(the physical cost: one exec of /bin/true from a Go program = ${exe} ms; run - launch - that = $(echo "scale=2; $over - $exe" | bc) ms)"
grep -q "moved into it instead" "$WORK/daemon.log" && echo "(the daemon logged migrations: $(grep -c 'moved into it instead' "$WORK/daemon.log"), the forced ones)"

# 100 concurrent runs from one runner.
t0=$(date +%s%N)
pids=()
for i in $(seq -w 1 100); do
	"$BIN" run --id "conc$i" -- sleep 1 2>>"$WORK/conc.err" &
	pids+=($!)
done
failed=0
for p in "${pids[@]}"; do wait "$p" || failed=$((failed + 1)); done
t1=$(date +%s%N)
# The daemon notices each end from the cgroup's events, after run returned: count once no
# job of them runs any more (at most 60 s).
for _ in $(seq 600); do
	"$BIN" jobs list --json >"$WORK/jobs.json"
	counts=$(python3 - "$WORK/jobs.json" <<'PY'
import json, sys
jobs = [j for j in json.load(open(sys.argv[1]))["jobs"] if j["id"].startswith("conc")]
print(len(jobs), sum(1 for j in jobs if j["state"] == "ended" and j["reason"] == "exited"), sum(1 for j in jobs if j["state"] == "running"))
PY
)
	[ "${counts##* }" = 0 ] && break
	sleep 0.1
done
counts=${counts% *}
left=0
for d in "$CGROOT"/jobs/*/; do
	[ -s "$d/cgroup.procs" ] && left=$((left + 1))
done
echo "100 concurrent run -- sleep 1: $failed failed, registered/ended $counts, cgroups with processes left $left, wall $(ms "$t0" "$t1") ms; $([ "$failed $counts $left" = "0 100 100 0" ] && echo PASS || echo FAIL)"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

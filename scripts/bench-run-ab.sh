#!/usr/bin/env bash
# scripts/bench-run-ab.sh — issue 27's run - launch for two builds side by side in one run
# (docs/benchmarks.md, "Issue 27"): each build serves its own daemon (default config but
# for its socket, state, registry and job cgroup root), and rounds alternate between them,
# each round timing `launch` then `run -- /bin/true` of one build, the builds' order
# swapped every round, so load hits both alike. Prints each build's medians, the median of
# the per-round run - launch, and the median per-round difference of run between them.
#   sudo scripts/bench-run-ab.sh OLD_BIN NEW_BIN [ROUNDS (61)]
#   sudo chrt -f 50 scripts/bench-run-ab.sh OLD NEW   # both daemons and every call real-time
# Needs root (job cgroups). Daemons, cgroups and the temp dir are removed on exit.
set -euo pipefail
[ -n "${EPOCHREALTIME:-}" ] || { echo "bench-run-ab: needs bash 5 (\$EPOCHREALTIME)" >&2; exit 1; }
[ $# -ge 2 ] || { echo "usage: $0 OLD_BIN NEW_BIN [ROUNDS]" >&2; exit 64; }
[ "$(id -u)" = 0 ] || { echo "bench-run-ab: run as root (job cgroups)" >&2; exit 1; }
BINS=("$1" "$2")
ROUNDS=${3:-61}
for b in "${BINS[@]}"; do [ -x "$b" ] || { echo "bench-run-ab: $b is not executable" >&2; exit 1; }; done
CG2=$(awk '$3 == "cgroup2" {print $2; exit}' /proc/mounts)
[ -n "$CG2" ] || { echo "bench-run-ab: no cgroup2 mount" >&2; exit 1; }
WORK=$(mktemp -d /tmp/sandboxd-bench-run-ab.XXXXXX)
PIDS=()
cleanup() {
	local rc=$?
	set +e
	for p in "${PIDS[@]}"; do kill "$p"; wait "$p"; done 2>/dev/null
	for i in 0 1; do
		d=$CG2/sandboxd-bench-run-ab-$$-$i
		[ -d "$d" ] || continue
		[ -e "$d/cgroup.kill" ] && echo 1 >"$d/cgroup.kill"
		find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
	done
	rm -rf "$WORK"
	exit "$rc"
}
trap cleanup EXIT INT TERM
for i in 0 1; do
	cat >"$WORK/$i.toml" <<CFG
site = []
[jobs]
cgroup_root = "$CG2/sandboxd-bench-run-ab-$$-$i"
[server]
socket = "$WORK/$i.sock"
state_dir = "$WORK/$i.state"
[reclaim]
auto_caches = []
CFG
	"${BINS[$i]}" serve --config "$WORK/$i.toml" --registry-dir "$WORK/$i.registry" >/dev/null 2>"$WORK/$i.log" &
	PIDS+=($!)
done
for i in 0 1; do
	for _ in $(seq 100); do SANDBOXD_SOCKET=$WORK/$i.sock "${BINS[$i]}" launch >/dev/null 2>&1 && break; sleep 0.1; done
	SANDBOXD_SOCKET=$WORK/$i.sock "${BINS[$i]}" launch >/dev/null || { echo "bench-run-ab: daemon $i did not come up: $(cat "$WORK/$i.log")" >&2; exit 1; }
	for _ in 1 2 3; do SANDBOXD_SOCKET=$WORK/$i.sock "${BINS[$i]}" run -- /bin/true >/dev/null 2>&1; done # warm the page cache
done
usec() { local t=${1/./}; echo "${t#0}"; } # $EPOCHREALTIME in µs, read without a fork
timeit() {
	local t0 t1
	t0=$EPOCHREALTIME
	"$@" >/dev/null 2>&1 || { echo "bench-run-ab: $* failed" >&2; exit 1; }
	t1=$EPOCHREALTIME
	echo $(($(usec "$t1") - $(usec "$t0")))
}
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg); kernel $(uname -r); $(nproc) cores; $(chrt -p $$ | sed -n 's/.*policy: //p' | head -1)"
for r in $(seq "$ROUNDS"); do
	order="0 1"
	[ $((r % 2)) = 0 ] && order="1 0"
	for i in $order; do
		export SANDBOXD_SOCKET=$WORK/$i.sock
		echo "$i $(timeit "${BINS[$i]}" launch) $(timeit "${BINS[$i]}" run -- /bin/true)"
	done
done >"$WORK/times"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$WORK/times" "${BINS[@]}" <<'PY'
import statistics as st, sys
rows = [l.split() for l in open(sys.argv[1])]
runs = {}
for i, name in (("0", "old"), ("1", "new")):
    L = [int(r[1]) / 1000 for r in rows if r[0] == i]
    R = [int(r[2]) / 1000 for r in rows if r[0] == i]
    D = [b - a for a, b in zip(L, R)]
    q = st.quantiles(D)
    runs[i] = R
    print(f"{name} {sys.argv[2 + int(i)]}: launch {st.median(L):.3f} ms, run {st.median(R):.3f} ms ({len(R)} runs); "
          f"run - launch: of the medians {st.median(R) - st.median(L):.3f} ms, per round median {st.median(D):.3f} ms (q1 {q[0]:.3f}, q3 {q[2]:.3f})")
print(f"run, new - old in the same round: median {st.median([b - a for a, b in zip(runs['0'], runs['1'])]):.3f} ms")
PY

#!/usr/bin/env bash
# scripts/bench-status.sh — issue 27's figures for GET /v1/status and launch, side by side
# in one run on the binary as shipped (bin/sandboxd, `make build`):
#   - GET /v1/status at 32 clients against a bare net/http handler answering a constant
#     small JSON ("bare") and against bare handlers answering sandboxd's own status
#     document ("bare-samebody": the handler of bench.sh section 1, no Content-Length;
#     "bare-samebody-cl": the same with Content-Length, as sandboxd sends it);
#     targets ≥ 0.7× bare and ≥ 0.8× the same bytes. Every client of these runs asks
#     for no content coding (identity: as curl, this repo's Node and Python clients);
#   - the same at 32 clients that ask for gzip and decode it, as Go's default Transport
#     (this repo's Go client and CLI) does ("status-gzip-c32"): sandboxd, which answers
#     identity, and bare handlers answering the same document gzip-coded at levels 1
#     and 9 ("bare-samebody-gzip1", "-gzip9": Content-Encoding: gzip, Vary, Content-Length),
#     i.e. what content negotiation of the status would reach, against the same constant
#     and same-bytes handlers (which ignore Accept-Encoding);
#   - launch p50 on a site of 16,381 entries against /livez of the same daemon; target
#     ≤ 1.5×.
# Rounds are interleaved (A, B, C, A, B, C, ...); the summary prints the medians over
# rounds and the ratios computed within each round (and their median), since on a loaded
# machine the rounds move together. Part of `make bench` (BENCH_STATUS=0 skips it); runs
# alone as `sudo scripts/bench-status.sh` after `make build`.
#
# Needs root (a private tmpfs) and bin/sandboxd. Nothing on this machine can be
# reclaimed: the daemons watch only their tmpfs, with no caches.
# Knobs: BENCH_ROUNDS (7), BENCH_SECONDS (1.5s per run), BENCH_OUT (result dir),
# BENCH_SANDBOXD (the binary; default bin/sandboxd, e.g. an older build to compare),
# BENCH_PARTS ("status launch", the default; "launch" runs only the launch part),
# BENCH_SANDBOXD_OLD (a second binary, e.g. the build before a change: its own daemon and
# site run launch and /livez in the same rounds, interleaved, as targets launch-old and
# livez-old, and the summary gives new/old within each round).
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
ROUNDS=${BENCH_ROUNDS:-7}
SECS=${BENCH_SECONDS:-1.5s}
OUT=${BENCH_OUT:-$ROOT/bench-results/status-$(date -u +%Y%m%dT%H%M%SZ)}
GO=${GO:-go}
command -v "$GO" >/dev/null || GO=/usr/local/go/bin/go

if [ "$(id -u)" != 0 ]; then
	echo "bench-status: run as root (it mounts a tmpfs)" >&2
	exit 1
fi
if [ ! -x bin/sandboxd ]; then
	echo "bench-status: bin/sandboxd missing; run 'make build'" >&2
	exit 1
fi

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
RESULTS=$OUT/results.jsonl
: >"$RESULTS"
WORK=$(mktemp -d /tmp/sandboxd-bench-status.XXXXXX)
PIDS=()
declare -A PIDOF # server name -> pid, for the CPU each answer costs it
CLK=$(getconf CLK_TCK)
FS=$WORK/fs

cleanup() {
	local rc=$?
	set +e
	for pid in "${PIDS[@]}"; do
		kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	done
	if mountpoint -q "$FS"; then umount "$FS" 2>/dev/null || umount -l "$FS"; fi
	rm -rf "$WORK"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { printf '\n== %s  (%s, load %s)\n' "$*" "$(date -u +%H:%M:%S)" "$(cut -d' ' -f1-3 /proc/loadavg)"; }

"$GO" build -o "$WORK/sandboxd-bench" ./cmd/sandboxd-bench
SB=$WORK/sandboxd-bench
SANDBOXD=${BENCH_SANDBOXD:-$ROOT/bin/sandboxd}
OLD=${BENCH_SANDBOXD_OLD:-}
PARTS=" ${BENCH_PARTS:-status launch} "
{
	echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown) $(git diff --quiet 2>/dev/null || echo '(dirty tree)')"
	echo "sandboxd: $($SANDBOXD version 2>&1 | head -1)"
	[ -z "$OLD" ] || echo "old sandboxd: $OLD: $($OLD version 2>&1 | head -1)"
	echo "nproc: $(nproc)"
	echo "uptime at start: $(uptime)"
	echo "rounds: $ROUNDS x $SECS per run"
} | tee "$OUT/machine.txt"

mkdir -p "$FS"
# 8 GiB, as bench.sh: above the default reclaim_below (1.5 GiB), so no pressure and no
# reclaim run the document would report (tmpfs pages are only used when written).
mount -t tmpfs -o size=8g,mode=0755 sandboxd-bench-status "$FS"

# daemon_config NAME: socket, state, watched path and site under $WORK, no caches;
# everything else is the shipped default.
daemon_config() {
	local name=$1
	mkdir -p "$FS/$name/site" "$WORK/$name/state"
	cat >"$WORK/$name.toml" <<EOF
version = 1
[server]
socket = "$WORK/$name.sock"
state_dir = "$WORK/$name/state"
[[filesystem]]
path = "$FS/$name"
reserve = "0"
[[site]]
name = "bench"
path = "$FS/$name/site"
[reclaim]
auto_caches = []
[jobs]
registry_dir = "$WORK/$name/registry"
EOF
	"${BIN:-$SANDBOXD}" config check "$WORK/$name.toml" >/dev/null
}

start() { # NAME ARGS... -> background process, waits for its socket to answer /livez
	local name=$1
	shift
	"$@" 2>"$OUT/$name.log" &
	PIDS+=("$!")
	PIDOF[$name]=$!
	"$SB" get -socket "$WORK/$name.sock" -path /livez -wait 30s >/dev/null
}

load() { # TEST TARGET ROUND SOCKET [FLAGS...]
	local test=$1 target=$2 round=$3 sock=$4
	shift 4
	local name
	name=$(basename "$sock" .sock)
	"$SB" load -socket "$sock" -test "$test" -target "$target" -round "$round" -server-pid "${PIDOF[$name]}" -clk-tck "$CLK" "$@" | tee -a "$RESULTS" |
		awk -v t="$test" -v g="$target" -v r="$round" '{
			match($0, /"p50_us":[0-9.]+/); p50 = substr($0, RSTART + 9, RLENGTH - 9)
			match($0, /"rps":[0-9.]+/); rps = substr($0, RSTART + 6, RLENGTH - 6)
			match($0, /"errors":[0-9]+/); e = substr($0, RSTART + 9, RLENGTH - 9)
			sc = cc = 0
			if (match($0, /"server_cpu_us":[0-9.]+/)) sc = substr($0, RSTART + 16, RLENGTH - 16)
			if (match($0, /"client_cpu_us":[0-9.]+/)) cc = substr($0, RSTART + 16, RLENGTH - 16)
			gz = ""
			if (match($0, /"gzip":true/)) { gz = "  gzip-coded 0"; if (match($0, /"gzipped":[0-9]+/)) gz = "  gzip-coded " substr($0, RSTART + 10, RLENGTH - 10) }
			printf "  %-15s %-19s round %d  p50 %7.1f us  %7.0f req/s  cpu/answer server %5.1f client %5.1f us  errors %s%s\n", t, g, r, p50, rps, sc, cc, e, gz }'
}

if [[ $PARTS == *" status "* ]]; then
log "GET /v1/status at 32 clients: sandboxd vs bare handlers (constant, same bytes, same bytes with Content-Length)"
daemon_config status
# In a mount namespace of its own (private propagation): the document lists the
# machine's unconfigured FUSE mounts, and other jobs' mounts coming and going on this
# machine would change its size between the runs (5,182 to 6,198 bytes in one run).
start status unshare -m --propagation private "$SANDBOXD" serve --config "$WORK/status.toml"
"$SB" get -socket "$WORK/status.sock" -path /readyz -wait 30s >/dev/null
# The document grows after ready (the start-up reclaim's report, the conditions' first
# states): the bare servers answer it as it is once settled, the bytes sandboxd sends
# during the runs (checked again after them).
sleep 3
"$SB" get -socket "$WORK/status.sock" -path /v1/status >"$OUT/status.json"
echo "  status document: $(wc -c <"$OUT/status.json") bytes"
start bare "$SB" bare -socket "$WORK/bare.sock"
start bare2 "$SB" bare -socket "$WORK/bare2.sock" -body-file "$OUT/status.json"
start bare3 "$SB" bare -socket "$WORK/bare3.sock" -body-file "$OUT/status.json" -content-length
start bare4 "$SB" bare -socket "$WORK/bare4.sock" -body-file "$OUT/status.json" -content-length -gzip 1
start bare5 "$SB" bare -socket "$WORK/bare5.sock" -body-file "$OUT/status.json" -content-length -gzip 9
for r in $(seq "$ROUNDS"); do
	for t in sandboxd:status bare:bare bare-samebody:bare2 bare-samebody-cl:bare3; do
		load status-c32 "${t%%:*}" "$r" "$WORK/${t#*:}.sock" -path /v1/status -clients 32 -duration "$SECS"
	done
	for t in sandboxd:status bare:bare bare-samebody-cl:bare3 bare-samebody-gzip1:bare4 bare-samebody-gzip9:bare5; do
		load status-gzip-c32 "${t%%:*}" "$r" "$WORK/${t#*:}.sock" -path /v1/status -clients 32 -duration "$SECS" -gzip
	done
	load livez-c32 sandboxd "$r" "$WORK/status.sock" -path /livez -clients 32 -duration "$SECS"
done
for r in $(seq "$ROUNDS"); do
	for t in sandboxd:status bare:bare bare-samebody:bare2; do
		load status-c1 "${t%%:*}" "$r" "$WORK/${t#*:}.sock" -path /v1/status -duration "$SECS"
	done
done
"$SB" get -socket "$WORK/status.sock" -path /v1/status >"$OUT/status-after.json"
echo "  status document after the runs: $(wc -c <"$OUT/status-after.json") bytes (the bare servers sent $(wc -c <"$OUT/status.json"))"
for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
PIDS=()
fi

if [[ $PARTS == *" launch "* ]]; then
log "launch on a site of 16,381 unexpired entries vs /livez of the same daemon (1 client)"
launch_daemon() { # NAME BINARY
	local name=$1
	BIN=$2 daemon_config "$name"
	"$SB" fill -dir "$FS/$name/site" -n 16381
	start "$name" "$2" serve --config "$WORK/$name.toml"
	# ready means sampled, not indexed: wait until the site's first scan counts every entry
	for _ in $(seq 300); do
		"$SB" get -socket "$WORK/$name.sock" -path /v1/status >"$OUT/$name-status.json"
		grep -q '"files":16381,' "$OUT/$name-status.json" && break
		sleep 0.1
	done
}
launch_daemon launch "$SANDBOXD"
[ -z "$OLD" ] || launch_daemon launchold "$OLD"
for r in $(seq "$ROUNDS"); do
	load launch16k launch "$r" "$WORK/launch.sock" -method POST -path /v1/launch -body '{"site":"bench"}' -duration "$SECS"
	load launch16k livez "$r" "$WORK/launch.sock" -path /livez -duration "$SECS"
	if [ -n "$OLD" ]; then
		load launch16k launch-old "$r" "$WORK/launchold.sock" -method POST -path /v1/launch -body '{"site":"bench"}' -duration "$SECS"
		load launch16k livez-old "$r" "$WORK/launchold.sock" -path /livez -duration "$SECS"
	fi
done
fi

log "summary (medians over rounds; ratios within each round; raw results in $OUT)"
{
	"$SB" report -in "$RESULTS" | sed -n '1,/^$/p'
	if [[ $PARTS == *" status "* ]]; then
	"$SB" ratio -in "$RESULTS" -test status-c32 -field rps -a sandboxd -b bare
	"$SB" ratio -in "$RESULTS" -test status-c32 -field rps -a sandboxd -b bare-samebody
	"$SB" ratio -in "$RESULTS" -test status-c32 -field rps -a sandboxd -b bare-samebody-cl
	"$SB" ratio -in "$RESULTS" -test status-c32 -field rps -a bare-samebody -b bare
	"$SB" ratio -in "$RESULTS" -test status-c32 -field cpu -a sandboxd -b bare
	"$SB" ratio -in "$RESULTS" -test status-c32 -field cpu -a sandboxd -b bare-samebody
	"$SB" ratio -in "$RESULTS" -test status-c32 -field cpu -a sandboxd -b bare-samebody-cl
	"$SB" ratio -in "$RESULTS" -test status-c1 -field p50 -a sandboxd -b bare-samebody
	echo "clients asking for gzip (Go's default Transport); sandboxd and bare-samebody-cl answer identity:"
	"$SB" ratio -in "$RESULTS" -test status-gzip-c32 -field rps -a sandboxd -b bare
	"$SB" ratio -in "$RESULTS" -test status-gzip-c32 -field rps -a sandboxd -b bare-samebody-cl
	"$SB" ratio -in "$RESULTS" -test status-gzip-c32 -field rps -a bare-samebody-gzip1 -b bare
	"$SB" ratio -in "$RESULTS" -test status-gzip-c32 -field rps -a bare-samebody-gzip9 -b bare
	"$SB" ratio -in "$RESULTS" -test status-gzip-c32 -field rps -a bare-samebody-gzip1 -b bare-samebody-cl
	"$SB" ratio -in "$RESULTS" -test status-gzip-c32 -field rps -a bare-samebody-gzip9 -b bare-samebody-cl
	"$SB" ratio -in "$RESULTS" -test status-gzip-c32 -field cpu -a bare-samebody-gzip1 -b bare-samebody-cl
	"$SB" ratio -in "$RESULTS" -test status-gzip-c32 -field cpu -a bare-samebody-gzip9 -b bare-samebody-cl
	echo "status document: $(wc -c <"$OUT/status.json") bytes before the runs, $(wc -c <"$OUT/status-after.json") after"
	fi
	if [[ $PARTS == *" launch "* ]]; then
	"$SB" ratio -in "$RESULTS" -test launch16k -field p50 -a launch -b livez
	if [ -n "$OLD" ]; then
		"$SB" ratio -in "$RESULTS" -test launch16k -field p50 -a launch-old -b livez-old
		"$SB" ratio -in "$RESULTS" -test launch16k -field p50 -a launch -b launch-old
		"$SB" ratio -in "$RESULTS" -test launch16k -field cpu -a launch -b launch-old
	fi
	fi
	echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUT/summary.txt"

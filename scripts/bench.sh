#!/usr/bin/env bash
# scripts/bench.sh — sandboxd's benchmark run (`make bench`), everything in one run so the
# figures sit side by side: HTTP over the Unix socket vs a bare net/http handler, the
# idle daemon's RSS and CPU, launch on a site of 16,381 entries (vs /livez, vs find, under
# churn), resume on a healthy box, and the packages' Go benchmarks. docs/benchmarks.md
# says what each figure means and which target it has.
#
# Needs root (it mounts a tmpfs) and bin/sandboxd (`make build`). Raw results go to
# $BENCH_OUT (default bench-results/<UTC time>/); the summary table is printed at the end.
# Knobs: BENCH_ROUNDS (5), BENCH_SECONDS (1.5s per run), BENCH_IDLE (60s),
# BENCH_CHURN (20s), BENCH_DRAIN (1: the daemon draining BENCH_DRAIN_FILES, 100,000,
# expired files, BENCH_DRAIN_FS "tmpfs ext4" x BENCH_DRAIN_MODES "default rate0 pressure",
# BENCH_DRAIN_ROUNDS (3) rounds of each but the 200-s default rate, ~10 min; 0: skip), BENCH_GO (1: run the Go benchmarks; 0: skip them), BENCH_MOUNTS (1: run
# the FUSE mount benchmarks of issues 5 and 12, ~9 min; 0: skip), BENCH_JOBS (1: the job benchmarks, ~1 min; 0: skip), BENCH_RUN (1: issue 27's sandboxd run figures, ~1 min; 0: skip), BENCH_MOUNT_CPU (30: seconds of each CPU window), BENCH_RECLAIM_DIRS
# (5000: reclaim's deletion benchmark on 50,000 files instead of its default 200,000,
# which alone takes ~6 min on ext4 here; set 20000 for the full size), BENCH_SIM (1: the
# fleet simulator of issue 28, ~1-2 min; 0: skip).
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
ROUNDS=${BENCH_ROUNDS:-5}
SECS=${BENCH_SECONDS:-1.5s}
IDLE=${BENCH_IDLE:-60s}
CHURN=${BENCH_CHURN:-20s}
RUN_GO=${BENCH_GO:-1}
RECLAIM_DIRS=${BENCH_RECLAIM_DIRS:-5000}
OUT=${BENCH_OUT:-$ROOT/bench-results/$(date -u +%Y%m%dT%H%M%SZ)}
GO=${GO:-go}
command -v "$GO" >/dev/null || GO=/usr/local/go/bin/go

if [ "$(id -u)" != 0 ]; then
	echo "bench: run as root (it mounts a tmpfs for the site benchmarks)" >&2
	exit 1
fi
if [ ! -x bin/sandboxd ]; then
	echo "bench: bin/sandboxd missing; run 'make build' (make bench does)" >&2
	exit 1
fi

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
RESULTS=$OUT/results.jsonl
: >"$RESULTS"
WORK=$(mktemp -d /tmp/sandboxd-bench.XXXXXX)
PIDS=()
MOUNTS=()

# cleanup stops what this script started, by pid, unmounts its tmpfs and removes its
# temp dir; it runs on every exit, also on failure or Ctrl-C.
cleanup() {
	local rc=$?
	set +e
	for pid in "${PIDS[@]}"; do
		kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	done
	for m in "${MOUNTS[@]}"; do
		umount "$m" 2>/dev/null || umount -l "$m"
	done
	rm -rf "$WORK"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { printf '\n== %s  (%s, load %s)\n' "$*" "$(date -u +%H:%M:%S)" "$(cut -d' ' -f1-3 /proc/loadavg)"; }

# stop PID: end one process this script started and drop it from PIDS.
stop() {
	local pid=$1 keep=()
	kill "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	for p in "${PIDS[@]}"; do [ "$p" = "$pid" ] || keep+=("$p"); done
	PIDS=("${keep[@]}")
}

log "building the bench program"
"$GO" build -o "$WORK/sandboxd-bench" ./cmd/sandboxd-bench
SB=$WORK/sandboxd-bench
SANDBOXD=$ROOT/bin/sandboxd

# --- the machine ---
{
	echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown) $(git diff --quiet 2>/dev/null || echo '(dirty tree)')"
	echo "sandboxd: $($SANDBOXD version 2>&1 | head -1)"
	echo "go: $("$GO" version)"
	echo "nproc: $(nproc)"
	echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
	echo "memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
	echo "kernel: $(uname -r)"
	echo "uptime at start: $(uptime)"
	echo "root fs: $(df -hT / | awk 'NR==2 {print $2, $3, "size,", $5, "avail"}')"
	echo "clk_tck: $(getconf CLK_TCK)"
	echo "rounds: $ROUNDS x $SECS per run, idle $IDLE, churn $CHURN"
} | tee "$OUT/machine.txt"

# One tmpfs holds every site and watched path of the daemons below, so nothing else on
# this machine (other jobs filling the root disk) moves their thresholds.
FS=$WORK/fs
mkdir -p "$FS"
mount -t tmpfs -o size=8g,mode=0755 sandboxd-bench "$FS"
MOUNTS+=("$FS")

# daemon_config NAME SITE_MAX_AGE SITE_MIN_AGE RESERVE: a config whose socket, state,
# watched path and site all live under $WORK, with no auto-discovered caches, so nothing
# real on this machine can be reclaimed.
daemon_config() {
	local name=$1 max_age=$2 min_age=$3 reserve=$4
	mkdir -p "$FS/$name/site" "$WORK/$name/state"
	cat >"$WORK/$name.toml" <<EOF
version = 1
[server]
socket = "$WORK/$name.sock"
state_dir = "$WORK/$name/state"
[[filesystem]]
path = "$FS/$name"
reserve = "$reserve"
[[site]]
name = "bench"
path = "$FS/$name/site"
max_age = "$max_age"
min_age = "$min_age"
[reclaim]
auto_caches = []
EOF
	"$SANDBOXD" config check "$WORK/$name.toml" >/dev/null
}

# start_daemon NAME ARGS...: run sandboxd serve ARGS in the background (log in $OUT),
# wait for /readyz; sets DPID.
start_daemon() {
	local name=$1
	shift
	"$SANDBOXD" serve "$@" 2>"$OUT/$name.log" &
	DPID=$!
	PIDS+=("$DPID")
	"$SB" get -socket "$WORK/$name.sock" -path /readyz -wait 30s >/dev/null
}

# load TEST TARGET ROUND SOCKET [FLAGS...]: one load run, appended to results.jsonl.
load() {
	local test=$1 target=$2 round=$3 sock=$4
	shift 4
	"$SB" load -socket "$sock" -test "$test" -target "$target" -round "$round" "$@" | tee -a "$RESULTS" |
		awk -v t="$test" -v g="$target" -v r="$round" '{
			match($0, /"p50_us":[0-9.]+/); p50 = substr($0, RSTART + 9, RLENGTH - 9)
			match($0, /"p99_us":[0-9.]+/); p99 = substr($0, RSTART + 9, RLENGTH - 9)
			match($0, /"rps":[0-9.]+/); rps = substr($0, RSTART + 6, RLENGTH - 6)
			match($0, /"errors":[0-9]+/); e = substr($0, RSTART + 9, RLENGTH - 9)
			printf "  %-22s %-14s round %d  p50 %8.1f us  p99 %8.1f us  %7.0f req/s  errors %s\n", t, g, r, p50, p99, rps, e }'
}

# ---------------------------------------------------------------------------------
log "1. HTTP over the Unix socket: sandboxd vs a bare net/http handler"
daemon_config http 12h 15m 0
start_daemon http --config "$WORK/http.toml"
HTTP_PID=$DPID
"$SB" bare -socket "$WORK/bare.sock" 2>"$OUT/bare.log" &
BARE_PID=$!
PIDS+=("$BARE_PID")
"$SB" get -socket "$WORK/bare.sock" -path /livez -wait 10s >/dev/null
# A second bare server answers sandboxd's own status document: the gap between it and
# the small-JSON one is the cost of moving the bigger body, the rest is sandboxd's work.
"$SB" get -socket "$WORK/http.sock" -path /v1/status >"$OUT/http-status.json"
"$SB" bare -socket "$WORK/bare2.sock" -body-file "$OUT/http-status.json" 2>>"$OUT/bare.log" &
BARE2_PID=$!
PIDS+=("$BARE2_PID")
"$SB" get -socket "$WORK/bare2.sock" -path /livez -wait 10s >/dev/null
echo "  status document: $(wc -c <"$OUT/http-status.json") bytes"
for ep in livez status; do
	path=/livez
	targets=(sandboxd:http bare:bare)
	if [ "$ep" = status ]; then
		path=/v1/status
		targets+=(bare-samebody:bare2)
	fi
	for clients in 1 32; do
		for r in $(seq "$ROUNDS"); do
			for t in "${targets[@]}"; do
				load "http-$ep-c$clients" "${t%%:*}" "$r" "$WORK/${t#*:}.sock" -path "$path" -clients "$clients" -duration "$SECS"
			done
		done
	done
done
# The CLI opens a connection per call: the per-connection cost (peer credentials) shows here.
for r in $(seq "$ROUNDS"); do
	load http-livez-fresh-c1 sandboxd "$r" "$WORK/http.sock" -path /livez -fresh -duration "$SECS"
	load http-livez-fresh-c1 bare "$r" "$WORK/bare.sock" -path /livez -fresh -duration "$SECS"
done
stop "$BARE2_PID"
stop "$BARE_PID"
stop "$HTTP_PID"

# ---------------------------------------------------------------------------------
log "2. idle daemon on the default config (observe mode; socket and state in a temp dir)"
# The embedded default watches / and discovers this machine's real caches; observe mode
# keeps every loop, sample and discovery running but changes nothing on disk, so a
# benchmark can never reclaim a real cache or prune a real /tmp/aura-bg.
mkdir -p "$WORK/idle/state"
start_daemon idle --socket "$WORK/idle.sock" --state-dir "$WORK/idle/state" --mode observe
IDLE_PID=$DPID
sleep 5 # the start-up resume and cache discovery run in the background after ready
"$SB" idle -pid "$IDLE_PID" -duration "$IDLE" -clk-tck "$(getconf CLK_TCK)" | tee -a "$RESULTS"
grep -E '^(VmRSS|VmHWM|Threads)' "/proc/$IDLE_PID/status" | tee "$OUT/idle-proc-status.txt"
stop "$IDLE_PID"

# ---------------------------------------------------------------------------------
log "3a. launch on a site of 16,381 unexpired entries (tmpfs), vs /livez and find"
daemon_config launch 12h 15m 0
"$SB" fill -dir "$FS/launch/site" -n 16381
start_daemon launch --config "$WORK/launch.toml"
LAUNCH_PID=$DPID
# ready means sampled, not indexed: wait until the site's first scan counts every entry
for _ in $(seq 300); do
	"$SB" get -socket "$WORK/launch.sock" -path /v1/status >"$OUT/launch-status-before.json"
	grep -q '"files":16381,' "$OUT/launch-status-before.json" && break
	sleep 0.1
done
for r in $(seq "$ROUNDS"); do
	load launch16k launch "$r" "$WORK/launch.sock" -method POST -path /v1/launch -body '{"site":"bench"}' -duration "$SECS"
	load launch16k livez "$r" "$WORK/launch.sock" -path /livez -duration "$SECS"
	# nothing is older than 720 min: find reads all 16,381 entries and deletes none
	"$SB" time -test find16k -target find -round "$r" -- \
		find "$FS/launch/site" -mindepth 1 -mmin +720 -delete | tee -a "$RESULTS"
done
"$SB" get -socket "$WORK/launch.sock" -path /v1/status >"$OUT/launch-status-after.json"
left=$(find "$FS/launch/site" -mindepth 1 -maxdepth 1 | wc -l)
echo "  entries left in the site: $left (16,381 expected: nothing was expired)"
stop "$LAUNCH_PID"

log "3b. launch p99 while 1,000 entries a second are created and expire (max_age 2s, min_age 0s)"
daemon_config churn 2s 0s 0
start_daemon churn --config "$WORK/churn.toml"
CHURN_PID=$DPID
"$SB" churn -dir "$FS/churn/site" -rate 1000 >"$OUT/churn-tally.json" 2>"$OUT/churn.log" &
GEN_PID=$!
PIDS+=("$GEN_PID")
sleep 5 # entries made from t=0 expire from t=2s on: by now creation and expiry are steady
"$SB" get -socket "$WORK/churn.sock" -path /v1/status >"$OUT/churn-status-before.json"
load launch-churn launch 1 "$WORK/churn.sock" -method POST -path /v1/launch -body '{"site":"bench"}' -duration "$CHURN"
"$SB" get -socket "$WORK/churn.sock" -path /v1/status >"$OUT/churn-status-after.json"
stop "$GEN_PID"
echo "  churn: $(cat "$OUT/churn-tally.json")"
echo "  site entries now: $(find "$FS/churn/site" -mindepth 1 -maxdepth 1 | wc -l)"
stop "$CHURN_PID"

log "3c. launch while a backlog of 16,381 expired entries drains, with the same churn (info)"
# Not a target of its own: what a launch costs when it meets a backlog (each call prunes
# up to its budget itself; the background drain takes the rest).
daemon_config backlog 2s 0s 0
"$SB" fill -dir "$FS/backlog/site" -n 16381 -age 1h
start_daemon backlog --config "$WORK/backlog.toml"
BACKLOG_PID=$DPID
"$SB" churn -dir "$FS/backlog/site" -rate 1000 >"$OUT/backlog-churn-tally.json" 2>>"$OUT/churn.log" &
GEN_PID=$!
PIDS+=("$GEN_PID")
"$SB" get -socket "$WORK/backlog.sock" -path /v1/status >"$OUT/backlog-status-before.json"
load launch-backlog launch 1 "$WORK/backlog.sock" -method POST -path /v1/launch -body '{"site":"bench"}' -duration 10s -warmup 0
"$SB" get -socket "$WORK/backlog.sock" -path /v1/status >"$OUT/backlog-status-after.json"
stop "$GEN_PID"
stop "$BACKLOG_PID"

# ---------------------------------------------------------------------------------
if [ "${BENCH_DRAIN:-1}" = 1 ]; then
	DRAIN_FILES=${BENCH_DRAIN_FILES:-100000}
	log "3d. the daemon draining $DRAIN_FILES expired files vs find -delete: tmpfs and ext4, default drain_rate, drain_rate = 0, InodePressure"
	# Each case gets a filesystem of its own (a tmpfs, or ext4 on a loop device backed by
	# a file on the root disk), so the drain's end is read from statfs: the inodes the
	# site's entries held are back. find runs first on one copy, then the daemon, as
	# shipped (default config: only socket, state, the watched path and the site point
	# into the benchmark, and no cache is auto-discovered), starts on an identical copy.
	# Under pressure the filesystem has 4% more inodes than the entries: InodePressure
	# (reclaim_below_inodes 5%) is true from the start.
	drain_fs() { # KIND MODE -> DRAIN_MP
		local kind=$1 mode=$2 inodes=$((DRAIN_FILES * 104 / 100))
		DRAIN_MP=$WORK/drain-$kind-$mode
		mkdir -p "$DRAIN_MP"
		if [ "$kind" = tmpfs ]; then
			local o=size=8g,mode=0755
			[ "$mode" = pressure ] && o=$o,nr_inodes=$inodes
			mount -t tmpfs -o "$o" sandboxd-drain "$DRAIN_MP"
		else
			truncate -s 8G "$WORK/drain-$kind-$mode.img"
			local n=()
			[ "$mode" = pressure ] && n=(-N "$inodes")
			mkfs.ext4 -q -F "${n[@]}" "$WORK/drain-$kind-$mode.img"
			mount -o loop "$WORK/drain-$kind-$mode.img" "$DRAIN_MP"
		fi
		MOUNTS+=("$DRAIN_MP")
		mkdir -p "$DRAIN_MP/site"
	}
	for kind in ${BENCH_DRAIN_FS:-tmpfs ext4}; do
		for mode in ${BENCH_DRAIN_MODES:-default rate0 pressure}; do
			drain_fs "$kind" "$mode"
			name=drain-$kind-$mode
			mkdir -p "$WORK/$name-state"
			extra=""
			[ "$mode" = rate0 ] && extra="drain_rate = 0"
			printf '%s\n' 'version = 1' '[server]' "socket = \"$WORK/$name.sock\"" "state_dir = \"$WORK/$name-state\"" \
				'[[filesystem]]' "path = \"$DRAIN_MP\"" '[[site]]' 'name = "bench"' "path = \"$DRAIN_MP/site\"" "$extra" \
				'[reclaim]' 'auto_caches = []' >"$WORK/$name.toml"
			"$SANDBOXD" config check "$WORK/$name.toml" >/dev/null
			# Rounds: single runs of the same deletion move by ±30% here (the kernel's
			# unlink alone took 0.1 s or 0.3 s for the same 100,000 files, run to run),
			# so the checks compare medians. The default rate takes 200 s: one round.
			rounds=${BENCH_DRAIN_ROUNDS:-3}
			[ "$mode" = default ] && rounds=1
			for round in $(seq 1 "$rounds"); do
				"$SB" fill -dir "$DRAIN_MP/site" -n "$DRAIN_FILES" -age 13h
				sync
				echo "  $name round $round: $(df -i "$DRAIN_MP" | awk 'NR==2 {print $3 " inodes used of " $2}') before find"
				# find -delete (every entry, no test: it needs no stat of its own on tmpfs
				# and ext4, whose getdents gives the type), then find by age, which must
				# stat every file as the daemon does, each on a fresh copy.
				"$SB" time -test "$name" -target find-delete -round "$round" -- \
					find "$DRAIN_MP/site" -mindepth 1 -delete | tee -a "$RESULTS"
				"$SB" fill -dir "$DRAIN_MP/site" -n "$DRAIN_FILES" -age 13h
				sync
				"$SB" time -test "$name" -target find -round "$round" -- \
					find "$DRAIN_MP/site" -mindepth 1 -mmin +720 -delete | tee -a "$RESULTS"
				"$SB" fill -dir "$DRAIN_MP/site" -n "$DRAIN_FILES" -age 13h
				sync
				rm -rf "$WORK/$name-state" && mkdir -p "$WORK/$name-state" # a fresh daemon each round
				"$SB" drain -test "$name" -round "$round" -dir "$DRAIN_MP/site" -files "$DRAIN_FILES" -socket "$WORK/$name.sock" -- \
					"$SANDBOXD" serve --config "$WORK/$name.toml" 2>"$OUT/$name-$round.log" | tee -a "$RESULTS"
				grep -E '^  event|events in the trail' "$OUT/$name-$round.log" | tail -4 || true
			done
			umount "$DRAIN_MP"
			rm -f "$WORK/drain-$kind-$mode.img"
		done
	done
fi

# ---------------------------------------------------------------------------------
log "4. resume on a healthy box: never cached (one statfs per filesystem), streamed and lone calls, reclaim"
daemon_config resume 12h 15m 256MiB
start_daemon resume --config "$WORK/resume.toml"
RESUME_PID=$DPID
# A healthy resume is measured on every call (issue 10: a cached healthy lied for 10 s
# after the disk filled); every answer is checked to carry "cached":false.
for r in $(seq "$ROUNDS"); do
	load resume resume "$r" "$WORK/resume.sock" -method POST -path /v1/resume -duration "$SECS" -count '"cached":false'
	load resume livez "$r" "$WORK/resume.sock" -path /livez -duration "$SECS"
done
# Lone calls: one primed resume on an open connection after a second of nothing, beside
# the same lone call to /livez (what one call costs when it is not in a stream).
for c in $(seq 5); do
	load resume-lone livez-lone "$c" "$WORK/resume.sock" -path /livez -requests 1 -warmup 0 -prime /livez
	load resume-lone resume "$c" "$WORK/resume.sock" -method POST -path /v1/resume -requests 1 -warmup 0 -prime /livez -count '"cached":false'
	sleep 1
done
# POST /v1/reclaim {"dry_run":false} runs the same healthy path (trigger manual), never cached.
for r in $(seq "$ROUNDS"); do
	load reclaim-healthy reclaim "$r" "$WORK/resume.sock" -method POST -path /v1/reclaim -body '{"dry_run":false}' -duration "$SECS"
	load reclaim-healthy livez "$r" "$WORK/resume.sock" -path /livez -duration "$SECS"
done
"$SB" get -socket "$WORK/resume.sock" -path /v1/status >"$OUT/resume-status.json"
stop "$RESUME_PID"

# ---------------------------------------------------------------------------------
if [ "$RUN_GO" = 1 ]; then
	log "5. Go benchmarks of the packages (-benchtime=1x: each variant once, tmpfs and ext4)"
	echo "SANDBOXD_BENCH_DIRS=$RECLAIM_DIRS (reclaim's cache: $((RECLAIM_DIRS * 10)) files)" | tee "$OUT/go-bench.txt"
	SANDBOXD_BENCH_DIRS=$RECLAIM_DIRS "$GO" test -run '^$' -bench . -benchtime=1x -timeout 20m \
		./pressure ./internal/safefs ./retention ./reclaim 2>&1 | tee -a "$OUT/go-bench.txt"
fi

# ---------------------------------------------------------------------------------
if [ "${BENCH_MOUNTS:-1}" = 1 ]; then
	log "6. FUSE mounts (issue 5): denial window, refresh, /livez and recovery while hung, CPU of probes (docs/benchmarks-mounts.md)"
	SANDBOXD_BENCH_CPU_SECONDS=${BENCH_MOUNT_CPU:-30} "$GO" test -run '^$' -bench 'Mount' -benchtime=1x -timeout 30m \
		./daemon 2>&1 | tee "$OUT/mount-bench.txt"
	log "6b. runtime mounts (issue 12): registration to first healthy probe, credential-expiry denial, CPU of 50 registered mounts"
	SANDBOXD_BENCH_CPU_SECONDS=${BENCH_MOUNT_CPU:-30} "$GO" test -run '^$' -bench 'Registered' -benchtime=1x -timeout 30m \
		./daemon 2>&1 | tee "$OUT/runtime-mount-bench.txt"
fi

# ---------------------------------------------------------------------------------
if [ "${BENCH_JOBS:-1}" = 1 ]; then
	log "7. jobs (issue 11): DELETE of 100 processes vs a kill loop over pgrep -g, heartbeat vs /livez, 1,000 idle jobs, lapse to empty"
	"$GO" test -run '^$' -bench 'Jobs' -benchtime=1x -timeout 20m ./daemon 2>&1 | tee "$OUT/jobs-bench.txt"
fi

# ---------------------------------------------------------------------------------
if [ "${BENCH_RUN:-1}" = 1 ]; then
	log "issue 27: sandboxd run -- /bin/true vs sandboxd launch vs the migration path; 100 concurrent runs (BENCH_RUN=0 skips)"
	"$ROOT/scripts/bench-run.sh" 2>&1 | tee "$OUT/run-bench.txt"
fi

# ---------------------------------------------------------------------------------
if [ "${BENCH_CLIENTS:-1}" = 1 ]; then
	log "issue 26: runner clients (Python, Node.js, Go): heartbeat vs /livez from the same client (BENCH_CLIENTS=0 skips)"
	"$ROOT/scripts/bench-clients.sh" 2>&1 | tee "$OUT/clients-bench.txt"
fi

# ---------------------------------------------------------------------------------
if [ "${BENCH_STATUS:-1}" = 1 ]; then
	log "issue 27: GET /v1/status at 32 clients vs bare handlers (constant, same bytes), launch p50 vs /livez (BENCH_STATUS=0 skips)"
	BENCH_OUT="$OUT/status" "$ROOT/scripts/bench-status.sh" 2>&1 | tee "$OUT/status-bench.txt"
fi

# ---------------------------------------------------------------------------------
if [ "${BENCH_BOOT:-1}" = 1 ]; then
	log "issue 22: sandboxd boot on a full disk (vs process start, vs df+rm) and image check of a 1 GiB image (vs dumpe2fs, e2fsck -fn) (BENCH_BOOT=0 skips)"
	"$ROOT/scripts/bench-boot.sh" 2>&1 | tee "$OUT/boot-bench.txt"
	"$GO" test -run '^$' -bench 'BootFull' -benchtime=20x ./daemon 2>&1 | tee -a "$OUT/boot-bench.txt"
fi

# ---------------------------------------------------------------------------------
if [ "${BENCH_SIM:-1}" = 1 ]; then
	log "9. the fleet simulator (issue 28): 1,000 sandboxes x 30 days x every policy of docs/policy.md (target: under 2 minutes on 2 cores)"
	"$GO" build -o "$WORK/sandboxd-sim" ./cmd/sandboxd-sim
	/usr/bin/time -f 'sim: wall %e s, user %U s, sys %S s, max RSS %M KiB' "$WORK/sandboxd-sim" -seed 1 \
		>"$OUT/policy-table.md" 2>"$OUT/sim.txt" || true
	cat "$OUT/sim.txt"
fi

# ---------------------------------------------------------------------------------
log "summary (medians over rounds; raw results in $OUT)"
echo "machine: $(nproc) cores, kernel $(uname -r), load at start: $(grep 'uptime at start' "$OUT/machine.txt" | sed 's/.*load average: //')"
"$SB" report -in "$RESULTS" -json "$OUT/summary.json" | tee "$OUT/summary.txt"
for f in "$OUT/go-bench.txt" "$OUT/mount-bench.txt" "$OUT/runtime-mount-bench.txt" "$OUT/jobs-bench.txt"; do
	if [ -f "$f" ]; then
		echo
		grep -E '^(Benchmark|ok|FAIL|---)' "$f" || true
	fi
done

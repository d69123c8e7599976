#!/usr/bin/env bash
# scripts/bench-clients.sh — issue 26's figure: a heartbeat from each runner client
# (Python, Node.js, Go) against a GET /livez from the same client, on one kept-alive
# connection, p50 per call, interleaved in blocks of 200 (2,000 calls each per language).
# Target: heartbeat ≤ 2× /livez. Part of `make bench` (section 9 of scripts/bench.sh,
# BENCH_CLIENTS=0 skips it); runs alone as `sudo scripts/bench-clients.sh` after `make build`.
#
# Needs root (a tmpfs, a cgroup for the one job) and bin/sandboxd. Nothing on this machine
# can be reclaimed: the daemon watches only its own tmpfs, with no caches.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SANDBOXD=$ROOT/bin/sandboxd
CALLS=${BENCH_CLIENT_CALLS:-2000}
WORK=$(mktemp -d /tmp/sandboxd-bench-clients.XXXXXX)
CG=""
PIDS=()
cleanup() {
	local rc=$?
	set +e
	for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; done
	if [ -n "$CG" ] && [ -d "$CG" ]; then
		find "$CG" -depth -type d | while read -r d; do echo 1 >"$d/cgroup.kill" 2>/dev/null; done
		sleep 0.2
		find "$CG" -depth -type d -exec rmdir {} \; 2>/dev/null
	fi
	umount "$WORK/fs" 2>/dev/null || umount -l "$WORK/fs" 2>/dev/null
	rm -rf "$WORK"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$WORK/fs"
mount -t tmpfs -o size=64m tmpfs "$WORK/fs"
mkdir -p "$WORK/fs/site"
CG=$(awk '$9 == "cgroup2" {print $5}' /proc/self/mountinfo | tail -1)/sandboxd-bench-clients-$$
SOCK=$WORK/s.sock
cat >"$WORK/sandboxd.toml" <<CFG
[server]
socket = "$SOCK"
state_dir = "$WORK/state"
[reclaim]
auto_caches = []
[[site]]
name = "bench"
path = "$WORK/fs/site"
[[filesystem]]
path = "$WORK/fs"
reclaim_below = "1MiB"
replace_below = "0"
reserve = "0"
[jobs]
cgroup_root = "$CG"
CFG
"$SANDBOXD" serve --config "$WORK/sandboxd.toml" >"$WORK/daemon.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 200); do
	curl -sf --unix-socket "$SOCK" http://sandboxd/readyz >/dev/null 2>&1 && break
	sleep 0.05
done
sleep 600 &
PIDS+=($!)
curl -sf --unix-socket "$SOCK" http://sandboxd/v1/jobs -d "{\"id\":\"bench\",\"pid\":$!,\"ttl\":\"1h\"}" >/dev/null

echo "issue 26: heartbeat vs /livez per client, $CALLS calls each, blocks of 200 ($(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores)"

SANDBOXD_SOCKET=$SOCK PYTHONPATH=$ROOT/clients/python/src python3 - "$CALLS" <<'PY'
import sys, time, sandboxd
n = int(sys.argv[1]); c = sandboxd.Client()
lv, hb = [], []
c.livez(); c.heartbeat("bench")
for _ in range(n // 200):
    for f, out in ((c.livez, lv), (lambda: c.heartbeat("bench"), hb)):
        for _ in range(200):
            t = time.perf_counter_ns(); f(); out.append(time.perf_counter_ns() - t)
med = lambda v: sorted(v)[len(v) // 2] / 1000
print(f"python  {sys.version.split()[0]:>8}  livez p50 {med(lv):7.1f} µs  heartbeat p50 {med(hb):7.1f} µs  ratio {med(hb)/med(lv):.2f}")
PY

SANDBOXD_SOCKET=$SOCK node --input-type=module -e "
import { Client } from '$ROOT/clients/node/index.js';
const n = Number(process.argv[1]); const c = new Client();
const lv = [], hb = [];
await c.livez(); await c.heartbeat('bench');
for (let r = 0; r < n / 200; r++) {
  for (const [f, out] of [[() => c.livez(), lv], [() => c.heartbeat('bench'), hb]]) {
    for (let i = 0; i < 200; i++) { const t = process.hrtime.bigint(); await f(); out.push(Number(process.hrtime.bigint() - t)); }
  }
}
const med = (v) => v.sort((a, b) => a - b)[Math.floor(v.length / 2)] / 1000;
console.log('node    ' + process.version.padStart(8) + '  livez p50 ' + med(lv).toFixed(1).padStart(7) + ' µs  heartbeat p50 ' + med(hb).toFixed(1).padStart(7) + ' µs  ratio ' + (med(hb) / med(lv)).toFixed(2));
c.close();
" "$CALLS"

cat >"$WORK/gobench.go" <<'GO'
package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"time"

	"github.com/sandboxd/sandboxd/client"
)

func main() {
	n, _ := strconv.Atoi(os.Args[1])
	c := &client.Client{}
	ctx := context.Background()
	c.Livez(ctx)
	c.Heartbeat(ctx, "bench", 0)
	var lv, hb []time.Duration
	for r := 0; r < n/200; r++ {
		for i := 0; i < 200; i++ {
			t := time.Now()
			c.Livez(ctx)
			lv = append(lv, time.Since(t))
		}
		for i := 0; i < 200; i++ {
			t := time.Now()
			c.Heartbeat(ctx, "bench", 0)
			hb = append(hb, time.Since(t))
		}
	}
	med := func(v []time.Duration) float64 {
		sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
		return float64(v[len(v)/2]) / 1000
	}
	fmt.Printf("go      %8s  livez p50 %7.1f µs  heartbeat p50 %7.1f µs  ratio %.2f\n", runtime.Version(), med(lv), med(hb), med(hb)/med(lv))
}
GO
mkdir -p "$ROOT/.run/bench-clients"
cp "$WORK/gobench.go" "$ROOT/.run/bench-clients/main.go"
(cd "$ROOT" && SANDBOXD_SOCKET=$SOCK go run ./.run/bench-clients "$CALLS")
rm -rf "$ROOT/.run/bench-clients"

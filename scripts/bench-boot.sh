#!/usr/bin/env bash
# scripts/bench-boot.sh — issue 22's figures (docs/benchmarks.md, "Issue 22"): the wall
# time of `sandboxd boot` on a full filesystem (target < 50 ms: guest init can afford it),
# beside a process start of the same binary and the shell one-liner an init script would
# otherwise run; and of `sandboxd image check` on a 1 GiB ext4 image (target < 1 s),
# beside `dumpe2fs -h` alone and a read-only `e2fsck -fn`.
#
# Needs root (loop mounts), bin/sandboxd (`make build`) and e2fsprogs. Rounds:
# BENCH_BOOT_ROUNDS (20). Everything it mounts and every loop device it sets up is removed
# on exit, also on failure.
set -euo pipefail
# Its own mount namespace: a namespace another process creates meanwhile would otherwise
# copy the loop mount and keep the filesystem mounted (journal "needs recovery") after
# our umount.
if [ -z "${BENCH_BOOT_NS:-}" ]; then
	exec unshare -m --propagation private env BENCH_BOOT_NS=1 bash "$0" "$@"
fi
cd "$(dirname "$0")/.."
ROUNDS=${BENCH_BOOT_ROUNDS:-20}
BIN=$PWD/bin/sandboxd
[ "$(id -u)" = 0 ] || { echo "bench-boot: run as root (loop mounts)" >&2; exit 1; }
[ -x "$BIN" ] || { echo "bench-boot: bin/sandboxd missing; run 'make build'" >&2; exit 1; }
WORK=$(mktemp -d /tmp/sandboxd-bench-boot.XXXXXX)
MNT=$WORK/disk
cleanup() {
	local rc=$?
	set +e
	mountpoint -q "$MNT" && umount "$MNT"
	for img in "$WORK"/*.img; do
		[ -e "$img" ] || continue
		losetup -j "$img" | cut -d: -f1 | while read -r d; do losetup -d "$d"; done
	done
	rm -rf "$WORK"
	exit "$rc"
}
trap cleanup EXIT INT TERM

ms() { echo "scale=2; ($2 - $1) / 1000000" | bc; }
# median of the numbers on stdin
median() { sort -n | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else printf "%.2f\n", (a[NR/2]+a[NR/2+1])/2}'; }

# 1. The boot check on a full 1 GiB ext4 disk with a 256 MiB reserve (the issue's example).
truncate -s 1G "$WORK/disk.img"
mkfs.ext4 -q -F -m 0 "$WORK/disk.img"
mkdir -p "$MNT" "$WORK/state"
mount -o loop "$WORK/disk.img" "$MNT"
cat >"$WORK/sandboxd.toml" <<CFG
site = []
[[filesystem]]
path = "$MNT"
reclaim_below = "384MiB"
replace_below = "128MiB"
reserve = "256MiB"
size_setting = "[openshell.drivers.vm] overlay_disk_mib"
[server]
state_dir = "$WORK/state"
[reclaim]
auto_caches = []
CFG
boot=() start=() shell=()
for i in $(seq "$ROUNDS"); do
	rm -f "$MNT/.sandboxd-reserve" "$MNT/fill" "$WORK/state/"*
	sync -f "$MNT" # ext4 frees a deleted file's blocks when the transaction commits
	fallocate -l 256MiB "$MNT/.sandboxd-reserve"
	fallocate -l "$(df -B1 --output=avail "$MNT" | tail -1)" "$MNT/fill" 2>/dev/null || true
	yes | dd of="$MNT/fill2" bs=4k iflag=fullblock status=none 2>/dev/null || true
	sync -f "$MNT"
	[ "$(df -B1 --output=avail "$MNT" | tail -1)" -lt $((1 << 20)) ] || { echo "bench-boot: the disk is not full" >&2; exit 1; }
	t0=$(date +%s%N); set +e; "$BIN" boot --config "$WORK/sandboxd.toml" >"$WORK/boot.out"; rc=$?; set -e; t1=$(date +%s%N)
	[ "$rc" = 11 ] || { echo "bench-boot: boot exited $rc: $(cat "$WORK/boot.out")" >&2; exit 1; }
	boot+=("$(ms "$t0" "$t1")")
	rm -f "$MNT/fill2"
	sync -f "$MNT"
	t0=$(date +%s%N); "$BIN" version >/dev/null; t1=$(date +%s%N)
	start+=("$(ms "$t0" "$t1")")
	fallocate -l 256MiB "$MNT/.sandboxd-reserve"
	t0=$(date +%s%N)
	sh -c 'a=$(df -B1 --output=avail "$1" | tail -1); if [ "$a" -lt 134217728 ]; then rm -f "$1/.sandboxd-reserve"; fi' sh "$MNT"
	t1=$(date +%s%N)
	shell+=("$(ms "$t0" "$t1")")
done
echo "line: $(cat "$WORK/boot.out")"
echo "boot check on a full 1 GiB ext4 (exit 11, ${ROUNDS} rounds): median $(printf '%s\n' "${boot[@]}" | median) ms, max $(printf '%s\n' "${boot[@]}" | sort -n | tail -1) ms"
echo "sandboxd version (process start):                 median $(printf '%s\n' "${start[@]}" | median) ms"
echo "sh: df + rm of the reserve:                       median $(printf '%s\n' "${shell[@]}" | median) ms"
umount "$MNT"

# 2. image check of a 1 GiB image (the same disk, stopped: reserve inside, 2/3 full).
mount -o loop "$WORK/disk.img" "$MNT"
rm -f "$MNT/fill" "$MNT/fill2"
fallocate -l 256MiB "$MNT/.sandboxd-reserve"
mkdir -p "$MNT/upper/home"
for d in $(seq 200); do mkdir "$MNT/upper/home/$d"; for f in $(seq 20); do head -c 4096 /dev/urandom >"$MNT/upper/home/$d/$f"; done; done
fallocate -l 400MiB "$MNT/upper/home/big"
umount "$MNT"
chk=() dump=() fsck=()
for i in $(seq "$ROUNDS"); do
	t0=$(date +%s%N); "$BIN" image check "$WORK/disk.img" >"$WORK/check.out"; t1=$(date +%s%N)
	chk+=("$(ms "$t0" "$t1")")
	t0=$(date +%s%N); dumpe2fs -h "$WORK/disk.img" >/dev/null 2>&1; t1=$(date +%s%N)
	dump+=("$(ms "$t0" "$t1")")
	t0=$(date +%s%N); e2fsck -fn "$WORK/disk.img" >/dev/null 2>&1 || true; t1=$(date +%s%N)
	fsck+=("$(ms "$t0" "$t1")")
done
echo "line: $(cat "$WORK/check.out")"
echo "sandboxd image check, 1 GiB image (page cache warm after round 1): median $(printf '%s\n' "${chk[@]}" | median) ms, max $(printf '%s\n' "${chk[@]}" | sort -n | tail -1) ms"
echo "dumpe2fs -h alone:                                    median $(printf '%s\n' "${dump[@]}" | median) ms"
echo "e2fsck -fn (a full read-only check):                  median $(printf '%s\n' "${fsck[@]}" | median) ms"

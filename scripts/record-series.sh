#!/bin/bash
# record-series.sh: record a filesystem's free space as a `sandboxd backtest` series.
#
#   scripts/record-series.sh [-i INTERVAL] [-b BEFORE] [-a AFTER] DIR OUT.csv -- CMD [ARG...]
#
# Samples statfs of DIR every INTERVAL seconds (default 0.25) from BEFORE seconds before
# CMD starts (default 5) until AFTER seconds after it ends (default 10), and writes
# OUT.csv with the header time,avail_bytes,size_bytes,files_free,files. CMD runs in DIR
# with bash -c; the series is what a sandboxd watching DIR would have sampled.
set -euo pipefail
iv=0.25 before=5 after=10
while getopts i:b:a: o; do
	case $o in
	i) iv=$OPTARG ;; b) before=$OPTARG ;; a) after=$OPTARG ;;
	*) exit 64 ;;
	esac
done
shift $((OPTIND - 1))
[ $# -ge 4 ] && [ "$3" = "--" ] || { echo "usage: $0 [-i S] [-b S] [-a S] DIR OUT.csv -- CMD..." >&2; exit 64; }
dir=$1 out=$2
shift 3
sample() {
	# %a blocks available to unprivileged users, %b blocks, %S block size, %d free inodes, %c inodes
	read -r a b s d c < <(stat -f -c '%a %b %S %d %c' "$dir")
	echo "$(date +%s.%N | cut -c1-14),$((a * s)),$((b * s)),$d,$c"
}
echo "time,avail_bytes,size_bytes,files_free,files" >"$out"
end=$(($(date +%s) + 100000))
(
	while [ "$(date +%s)" -lt "$end" ] && [ ! -e "$out.stop" ]; do
		sample >>"$out"
		sleep "$iv"
	done
) &
sampler=$!
sleep "$before"
(cd "$dir" && bash -c "$*") || echo "record-series: the command exited $?" >&2
sleep "$after"
touch "$out.stop"
wait "$sampler"
rm -f "$out.stop"
echo "record-series: $(($(wc -l <"$out") - 1)) samples in $out" >&2

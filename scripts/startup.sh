#!/usr/bin/env bash
# Start-up time of `BINARY version`, each run a fresh process (the page
# cache cannot be dropped here, so "cold" means a new process, not a cold
# disk): prints, per binary, the median of N runs (default 20) with the
# fastest and slowest, and the binary's size.
#
#   scripts/startup.sh [-n N] BINARY...     (make startup: bin/breakglass bin/breakglass-lab)
set -euo pipefail

runs=20
if [[ ${1:-} == -n ]]; then
	runs=$2
	shift 2
fi
if [[ $# -eq 0 ]]; then
	echo "usage: $0 [-n N] BINARY..." >&2
	exit 2
fi

# Microseconds since the epoch, without forking (bash 5's EPOCHREALTIME).
now_us() {
	if [[ -n ${EPOCHREALTIME:-} ]]; then
		local t=${EPOCHREALTIME/[.,]/}
		echo "$((10#$t))"
	else
		echo "$(($(date +%s%N) / 1000))"
	fi
}

for bin in "$@"; do
	if [[ ! -x $bin ]]; then
		echo "$bin: not an executable (make build)" >&2
		exit 1
	fi
	times=()
	for ((i = 0; i < runs; i++)); do
		t0=$(now_us)
		"$bin" version >/dev/null
		t1=$(now_us)
		times+=($((t1 - t0)))
	done
	mapfile -t sorted < <(printf '%s\n' "${times[@]}" | sort -n)
	n=${#sorted[@]}
	if ((n % 2)); then
		median=${sorted[n / 2]}
	else
		median=$(((sorted[n / 2 - 1] + sorted[n / 2]) / 2))
	fi
	size=$(wc -c <"$bin")
	ms() { printf '%d.%01d ms' $(($1 / 1000)) $((($1 % 1000) / 100)); }
	printf '%s: `version` median %s of %d runs (min %s, max %s); size %d bytes (%d.%01d MB)\n' \
		"$bin" "$(ms "$median")" "$n" "$(ms "${sorted[0]}")" "$(ms "${sorted[n - 1]}")" \
		"$size" $((size / 1000000)) $(((size % 1000000) / 100000))
done

#!/usr/bin/env bash
# Adapted per-host limits in a fleet: each worker's own against limits shared through the
# store. JOBS downloads of 256 KiB at 512 KiB/s (half a second each) from one host that
# answers 429 (Retry-After: 1) while 4 of its responses are under way, run by WORKERS
# workers on one PostgreSQL store, each with --per-host 16 and --jobs 16.
#
#   bench/fleet-limits.sh [JOBS] [ROUNDS] [WORKERS]     (defaults 120, 3 and 3; medians)
#
# "own": a worker lowers its limit only for the 429s it is answered
# (TRANSFERD_SHARED_HOST_LIMITS=0); "shared" (the default): it also takes each cut another
# worker makes, told by the store's change feed as it is saved. Prints wall time, the
# 429s the host answered, and the responses under way on average over the middle half (the
# host takes 4; the floor for the wall time is JOBS x 0.5 s / 4).
set -euo pipefail

jobs="${1:-120}"
rounds="${2:-3}"
count="${3:-3}"
# shellcheck source=bench/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

make_small_files "$jobs" >/dev/null
base="$work/fleet-limits"
rm -rf "$base"
mkdir -p "$base"
leftovers+=("$base")

# stats KEY: "refused mean_active" from the fault server's record of KEY.
stats() {
    curl -s "$TRANSFERD_TEST_FAULT/_stats?key=$1" | python3 -c '
import json, sys
s = json.load(sys.stdin)
h = s.get("active_history") or [[0, 0]]
end = h[-1][0]; a, b = end * 0.25, end * 0.75
w = sum(p[1] * (min(n[0], b) - max(p[0], a)) for p, n in zip(h, h[1:]) if n[0] > a and p[0] < b)
print(s.get("refused", 0), "%.2f" % (w / max(0.001, b - a)))'
}

declare -A wall refused active
run=0
for ((round = 1; round <= rounds; round++)); do
    for mode in own shared; do
        run=$((run + 1))
        dir="$base/run-$run"
        key="limits-$$-$run"
        mkdir -p "$dir/queue.d"
        {
            printf '{"version": 1, "jobs": [\n'
            for ((i = 0; i < jobs; i++)); do
                printf '%s{"id": "j%d", "url": "%s/small/f%d.bin?max_active=4&rate=524288&key=%s", "dest": "out/f%d.bin"}\n' \
                    "$([[ $i -gt 0 ]] && echo ,)" "$i" "$TRANSFERD_TEST_FAULT" "$i" "$key" "$i"
            done
            printf ']}\n'
        } > "$dir/queue.d/many.json"
        store=(--store "$(fresh_postgres_store "bench_limits_${run}_$$")")
        "$transferd" ingest --queue "$dir/queue.d" "${store[@]}" >/dev/null
        shared=0
        [[ $mode == shared ]] && shared=1  # (the default)
        pids=()
        started=$(date +%s.%N)
        for ((i = 0; i < count; i++)); do
            TRANSFERD_SHARED_HOST_LIMITS=$shared "$transferd" run --queue "$dir/queue.d" --jobs 16 --per-host 16 --quiet \
                --worker "bench-$i" "${store[@]}" &
            pids+=($!)
        done
        for pid in "${pids[@]}"; do wait "$pid" || { echo "bench: $mode: a worker failed" >&2; exit 1; }; done
        ended=$(date +%s.%N)
        n=$(find "$dir/out" -name 'f*.bin' | wc -l)
        [[ $n -eq $jobs ]] || { echo "bench: $mode left $n files, not $jobs" >&2; exit 1; }
        read -r r a < <(stats "$key")
        wall[$mode]+=" $(awk -v a="$started" -v b="$ended" 'BEGIN { printf "%.2f", b - a }')"
        refused[$mode]+=" $r"
        active[$mode]+=" $a"
        echo "bench: round $round: $mode done" >&2
    done
done

printf '\n%d jobs of half a second from a host that takes 4 at once, %d workers on one PostgreSQL store,\nmedians of %d interleaved rounds, %s, %d cores\n\n' \
    "$jobs" "$count" "$rounds" "$(date -u +%Y-%m-%d)" "$(nproc)"
printf '| %-7s | %7s | %8s | %11s |\n' limits "wall s" "429s" "under way"
printf '|%s|%s|%s|%s|\n' "---------" "---------" "----------" "-------------"
for mode in own shared; do
    printf '| %-7s | %7s | %8s | %11s |\n' "$mode" "$(median <<< "${wall[$mode]}")" "$(median <<< "${refused[$mode]}")" \
        "$(median <<< "${active[$mode]}")"
done
printf '\nper round (wall s / 429s / under way):\n'
for mode in own shared; do printf '  %-7s %s / %s / %s\n' "$mode" "${wall[$mode]}" "${refused[$mode]}" "${active[$mode]}"; done

#!/usr/bin/env bash
# Fleet scaling when each job waits on its server: JOBS downloads of 4 KiB from
# the fault server, each answered after 50 ms (headers, then a 50 ms stall,
# then the body), run by 1, 2, 4 and 8 workers sharing one PostgreSQL store,
# each worker with --jobs 1. The workers, not this machine's two cores, are
# then the limit: one worker can do at most 20 jobs/s, eight 160.
#
#   bench/fleet-latency.sh [JOBS] [ROUNDS]     (defaults 400 and 3; medians are shown)
#
# Prints wall time, jobs/s and the speed-up over one worker.
set -euo pipefail

jobs="${1:-400}"
rounds="${2:-3}"
# shellcheck source=bench/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

make_tiny_file >/dev/null
base="$work/fleet-latency"
rm -rf "$base"
mkdir -p "$base"
leftovers+=("$base")

# make_queue DIR RUN: a queue folder with one job file of $jobs downloads, each its own
# stall key (the fault server stalls each key's first answer).
make_queue() {
    mkdir -p "$1/queue.d"
    {
        printf '{"version": 1, "jobs": [\n'
        for ((i = 0; i < jobs; i++)); do
            printf '%s{"id": "j%d", "url": "%s/tiny/t.bin?stall_after=0&stall_seconds=0.05&key=r%s-j%d", "dest": "out/t%d.bin"}\n' \
                "$([[ $i -gt 0 ]] && echo ,)" "$i" "$TRANSFERD_TEST_FAULT" "$2" "$i" "$i"
        done
        printf ']}\n'
    } > "$1/queue.d/many.json"
}

declare -A wall
workers=(1 2 4 8)
run=0
for ((round = 1; round <= rounds; round++)); do
    for count in "${workers[@]}"; do
        run=$((run + 1))
        dir="$base/run-$run"
        make_queue "$dir" "$run"
        store=(--store "$(fresh_postgres_store "bench_latency_${run}_$$")")
        "$transferd" ingest --queue "$dir/queue.d" "${store[@]}" >/dev/null
        pids=()
        started=$(date +%s.%N)
        for ((i = 0; i < count; i++)); do
            "$transferd" run --queue "$dir/queue.d" --jobs 1 --quiet --worker "bench-$i" "${store[@]}" &
            pids+=($!)
        done
        for pid in "${pids[@]}"; do wait "$pid" || { echo "bench: $count workers: a worker failed" >&2; exit 1; }; done
        ended=$(date +%s.%N)
        n=$(find "$dir/out" -name 't*.bin' | wc -l)
        [[ $n -eq $jobs ]] || { echo "bench: $count workers left $n files, not $jobs" >&2; exit 1; }
        wall[$count]+=" $(awk -v a="$started" -v b="$ended" 'BEGIN { printf "%.2f", b - a }')"
        echo "bench: round $round: $count workers done" >&2
    done
done

printf '\n%d jobs of 4 KiB, each answered after 50 ms, --jobs 1 per worker, one PostgreSQL store,\nmedians of %d interleaved rounds, %s, %d cores\n\n' \
    "$jobs" "$rounds" "$(date -u +%Y-%m-%d)" "$(nproc)"
printf '| %-9s | %7s | %7s | %9s |\n' workers "wall s" "jobs/s" "vs one"
printf '|%s|%s|%s|%s|\n' "-----------" "---------" "---------" "-----------"
one=$(median <<< "${wall[1]}")
for count in "${workers[@]}"; do
    awk -v n="$count" -v w="$(median <<< "${wall[$count]}")" -v one="$one" -v j="$jobs" 'BEGIN {
        printf "| %-9s | %7.2f | %7.1f | %8.2fx |\n", n, w, j / w, one / w }'
done
printf '\nwall times per round (s):\n'
for count in "${workers[@]}"; do printf '  %-2s workers: %s\n' "$count" "${wall[$count]}"; done

#!/usr/bin/env bash
# Fleet benchmark: 10,000 small jobs (4 KiB downloads from the local nginx,
# every job's state persisted, every file durable) run by one worker on its
# own SQLite store, then by 1, 2 and 4 workers sharing one PostgreSQL store
# (the throw-away cluster scripts/servers starts, a fresh database per run).
#
#   bench/fleet.sh [JOBS] [ROUNDS]     (defaults 10000 and 3; medians are shown)
#
# Rounds are interleaved (every case once per round), twice: with the queue
# folders on the disk, and on a tmpfs (/dev/shm), where creating and syncing
# the files costs next to nothing and what is left is the store's own cost.
# Each run gets a folder of its own and nothing is deleted until the end:
# on ext4 without a journal (this VM's disk) creating a file within 30 s of
# many deletions scans the recently freed inodes (`recently_deleted` in the
# kernel's profile), which made whichever case ran after a deletion up to
# 2x slower.
#
# Prints wall time, jobs per second, CPU milliseconds per job (all worker
# processes together, user + system; PostgreSQL's postmaster with the
# backends it reaped; nginx) and the largest worker's peak RSS.
set -euo pipefail

jobs="${1:-10000}"
rounds="${2:-3}"
# shellcheck source=bench/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

make_tiny_file >/dev/null

disk_base="$work/fleet"
memory_base="/dev/shm/transferd-fleet.$$"
if [[ -e $disk_base ]]; then
    rm -rf "$disk_base"
    echo "bench: removed an earlier run's files; waiting 35 s (see the note at the top)" >&2
    sleep 35
fi
mkdir -p "$disk_base" "$memory_base"
trap 'rm -rf "$memory_base" "$disk_base"; scripts/servers stop "$servers" >/dev/null 2>&1 || true' EXIT

# make_queue DIR: a queue folder with one job file of $jobs downloads.
make_queue() {
    mkdir -p "$1/queue.d"
    {
        printf '{"version": 1, "jobs": [\n'
        for ((i = 0; i < jobs; i++)); do
            printf '%s{"id": "j%d", "url": "%s/tiny/t.bin", "dest": "out/%d/t%d.bin"}\n' \
                "$([[ $i -gt 0 ]] && echo ,)" "$i" "$TRANSFERD_TEST_HTTP" "$((i / 1000))" "$i"
        done
        printf ']}\n'
    } > "$1/queue.d/many.json"
}

check_done() {  # DIR NAME
    local n
    n=$(find "$1/out" -name 't*.bin' | wc -l)
    [[ $n -eq $jobs ]] || { echo "bench: $2 left $n files, not $jobs" >&2; exit 1; }
}

ticks=$(getconf CLK_TCK)
# CPU seconds the servers used so far: PostgreSQL's postmaster with the backends it
# reaped (they exit with their worker's connection), and nginx's processes.
# (The pid file names runuser, which started the postmaster as the postgres user.)
postgres_cpu() {
    local postmaster
    postmaster=$(pgrep -P "$(cat "$servers/pids/postgres.pid")" | head -1)
    awk -v t="$ticks" '{ printf "%.2f", ($14 + $15 + $16 + $17) / t }' "/proc/$postmaster/stat"
}
nginx_cpu() {
    local total=0 pid
    for pid in $(pgrep -f "nginx: (master|worker)"); do
        total=$(awk -v t="$ticks" -v sum="$total" '{ printf "%.2f", sum + ($14 + $15) / t }' "/proc/$pid/stat")
    done
    echo "$total"
}

# Per "place|case": space-separated values, one per round.
declare -A wall cpu rss db web
# run_workers KEY DIR COUNT [--store URL]: COUNT workers at once on DIR's queue.
run_workers() {
    local key=$1 dir=$2 count=$3 i pids=()
    shift 3
    local started ended db_before web_before
    db_before=$(postgres_cpu)
    web_before=$(nginx_cpu)
    started=$(date +%s.%N)
    for ((i = 0; i < count; i++)); do
        /usr/bin/time -f "%e %U %S %M" -o "$dir/time.$i" \
            "$transferd" run --queue "$dir/queue.d" --jobs 16 --quiet --worker "bench-$i" "$@" &
        pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid" || { echo "bench: $key: a worker failed" >&2; exit 1; }; done
    ended=$(date +%s.%N)
    sleep 0.5 # the postmaster reaps the backends of the closed connections
    db[$key]+=" $(awk -v a="$db_before" -v b="$(postgres_cpu)" 'BEGIN { print b - a }')"
    web[$key]+=" $(awk -v a="$web_before" -v b="$(nginx_cpu)" 'BEGIN { print b - a }')"
    wall[$key]+=" $(awk -v a="$started" -v b="$ended" 'BEGIN { printf "%.2f", b - a }')"
    local total=0 peak=0 e u s m
    for ((i = 0; i < count; i++)); do
        read -r e u s m < "$dir/time.$i"
        total=$(awk -v t="$total" -v u="$u" -v s="$s" 'BEGIN { print t + u + s }')
        ((m > peak)) && peak=$m
    done
    cpu[$key]+=" $total"
    rss[$key]+=" $peak"
    check_done "$dir" "$key"
}

cases=("1 worker, SQLite" "1 worker, PostgreSQL" "2 workers, PostgreSQL" "4 workers, PostgreSQL")
places=(disk tmpfs)
run=0
for place in "${places[@]}"; do
    base=$disk_base
    [[ $place == tmpfs ]] && base=$memory_base
    for ((round = 1; round <= rounds; round++)); do
        for name in "${cases[@]}"; do
            run=$((run + 1))
            dir="$base/run-$run"
            make_queue "$dir"
            count=${name%% *}
            store=()
            if [[ $name == *PostgreSQL ]]; then
                store=(--store "$(fresh_postgres_store "bench_fleet_${run}_$$")")
            fi
            "$transferd" ingest --queue "$dir/queue.d" "${store[@]}" >/dev/null
            sync
            run_workers "$place|$name" "$dir" "$count" "${store[@]}"
            echo "bench: $place, round $round: $name done" >&2
        done
    done
done


for place in "${places[@]}"; do
    where="queue folders on the disk (ext4)"
    [[ $place == tmpfs ]] && where="queue folders on a tmpfs"
    printf '\n%d jobs (4 KiB each, from nginx on 127.0.0.1), %s, medians of %d interleaved rounds, %s, %d cores\n\n' \
        "$jobs" "$where" "$rounds" "$(date -u +%Y-%m-%d)" "$(nproc)"
    printf '| %-23s | %7s | %7s | %8s | %14s | %14s | %10s | %12s |\n' case "wall s" "jobs/s" "vs SQLite" \
        "worker CPU ms" "PostgreSQL ms" "nginx ms" "peak RSS MiB"
    printf '|%s|%s|%s|%s|%s|%s|%s|%s|\n' "-------------------------" "---------" "---------" "----------" \
        "----------------" "----------------" "------------" "--------------"
    sqlite_wall=$(median <<< "${wall[$place|${cases[0]}]}")
    for name in "${cases[@]}"; do
        key="$place|$name"
        awk -v n="$name" -v w="$(median <<< "${wall[$key]}")" -v base="$sqlite_wall" -v j="$jobs" \
            -v c="$(median <<< "${cpu[$key]}")" -v d="$(median <<< "${db[$key]}")" -v g="$(median <<< "${web[$key]}")" \
            -v r="$(median <<< "${rss[$key]}")" 'BEGIN {
            printf "| %-23s | %7.2f | %7.0f | %7.2fx | %14.3f | %14.3f | %10.3f | %12.1f |\n",
                n, w, j / w, base / w, c / j * 1000, d / j * 1000, g / j * 1000, r / 1024 }'
    done
    printf '\nwall times per round (s):\n'
    for name in "${cases[@]}"; do printf '  %-23s %s\n' "$name" "${wall[$place|$name]}"; done
done

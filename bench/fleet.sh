#!/usr/bin/env bash
# Fleet benchmark: 10,000 small jobs (4 KiB downloads from the local nginx,
# every job's state persisted, every file durable) run by one worker on its
# own SQLite store, then by 1, 2 and 4 workers sharing one PostgreSQL store
# (the throw-away cluster scripts/servers starts, a fresh database per case).
#
#   bench/fleet.sh [JOBS]     (default 10000)
#
# Prints wall time, jobs per second, CPU seconds per 1,000 jobs (all worker
# processes together, user + system) and the largest worker's peak RSS.
set -euo pipefail

jobs="${1:-10000}"
# shellcheck source=bench/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

tiny="$TRANSFERD_TEST_WWW/tiny"
mkdir -p "$tiny"
[[ -f $tiny/t.bin ]] || head -c 4096 /dev/urandom > "$tiny/t.bin"

# make_queue DIR: a queue folder with one job file of $jobs downloads.
make_queue() {
    rm -rf "$1" && mkdir -p "$1/queue.d"
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

declare -A wall cpu rss db web
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
# run_workers NAME DIR COUNT [--store URL]: COUNT workers at once on DIR's queue.
run_workers() {
    local name=$1 dir=$2 count=$3 i pids=()
    shift 3
    local started ended db_before web_before
    db_before=$(postgres_cpu)
    web_before=$(nginx_cpu)
    started=$(date +%s.%N)
    for ((i = 0; i < count; i++)); do
        /usr/bin/time -f "%e %U %S %M" -o "$work/time.$i" \
            "$transferd" run "$dir/queue.d" --jobs 16 --quiet --worker "bench-$i" "$@" &
        pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid" || { echo "bench: $name: a worker failed" >&2; exit 1; }; done
    ended=$(date +%s.%N)
    sleep 0.5 # the postmaster reaps the backends of the closed connections
    db[$name]=$(awk -v a="$db_before" -v b="$(postgres_cpu)" 'BEGIN { print b - a }')
    web[$name]=$(awk -v a="$web_before" -v b="$(nginx_cpu)" 'BEGIN { print b - a }')
    wall[$name]=$(awk -v a="$started" -v b="$ended" 'BEGIN { printf "%.2f", b - a }')
    local total=0 peak=0 e u s m
    for ((i = 0; i < count; i++)); do
        read -r e u s m < "$work/time.$i"
        total=$(awk -v t="$total" -v u="$u" -v s="$s" 'BEGIN { print t + u + s }')
        ((m > peak)) && peak=$m
    done
    cpu[$name]=$total
    rss[$name]=$peak
    check_done "$dir" "$name"
}

names=("1 worker, SQLite")
make_queue "$work/fleet-sqlite"
"$transferd" ingest "$work/fleet-sqlite/queue.d" >/dev/null
sync
run_workers "${names[0]}" "$work/fleet-sqlite" 1

for count in 1 2 4; do
    plural=""
    ((count == 1)) || plural=s
    name="$count worker$plural, PostgreSQL"
    names+=("$name")
    database="bench_fleet_${count}_$$_$RANDOM"
    psql -q "$TRANSFERD_TEST_POSTGRES" -c "CREATE DATABASE $database" >/dev/null
    store="${TRANSFERD_TEST_POSTGRES%/*}/$database"
    make_queue "$work/fleet-pg"
    "$transferd" ingest "$work/fleet-pg/queue.d" --store "$store" >/dev/null
    sync
    run_workers "$name" "$work/fleet-pg" "$count" --store "$store"
    echo "bench: $name done" >&2
done

printf '\n%d jobs (4 KiB each, from nginx on 127.0.0.1), %s, %d cores\n\n' "$jobs" "$(date -u +%Y-%m-%d)" "$(nproc)"
printf 'CPU seconds per 1,000 jobs: the workers (user + system), PostgreSQL, nginx\n\n'
printf '| %-26s | %7s | %7s | %11s | %10s | %9s | %12s |\n' case "wall s" "jobs/s" "worker CPU" "PostgreSQL" "nginx" "peak RSS MiB"
printf '|%s|%s|%s|%s|%s|%s|%s|\n' "----------------------------" "---------" "---------" "-------------" "------------" "-----------" "--------------"
for name in "${names[@]}"; do
    awk -v n="$name" -v w="${wall[$name]}" -v c="${cpu[$name]}" -v r="${rss[$name]}" -v j="$jobs" -v d="${db[$name]}" -v g="${web[$name]}" 'BEGIN {
        printf "| %-26s | %7.2f | %7.0f | %11.2f | %10.2f | %9.2f | %12.1f |\n", n, w, j / w, c / j * 1000, d / j * 1000, g / j * 1000, r / 1024 }'
done

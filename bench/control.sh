#!/usr/bin/env bash
# The cost of being watched over HTTP: 1,000 x 256 KiB through
# `transferd run --watch --listen --jobs 16` with no event-stream client and
# with 10 (curl -N on /v1/events), in turns. Each round starts the run on an
# empty queue, attaches the clients, waits until /metrics counts them all
# (transferd_event_streams), then drops the job file in and times until
# /v1/summary says 1,000 done. Every client must have received all 1,000
# `finished` events (none dropped to a reset). Files on a tmpfs (/dev/shm), as
# in progress.sh, so disk noise does not drown the difference.
#
#   bench/control.sh [RUNS] [CLIENTS]     (defaults 7 and 10; the median is shown)
set -euo pipefail

runs="${1:-7}"
clients="${2:-10}"
# shellcheck source=bench/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

count=1000
make_small_files "$count" >/dev/null
list="$work/control.urls"
: > "$list"
for ((i = 0; i < count; i++)); do echo "$TRANSFERD_TEST_HTTP/small/f$i.bin out" >> "$list"; done

fast="/dev/shm/transferd-bench-control"
[[ -d /dev/shm ]] || fast="$work/control-disk"
run_pid=""
cleanup() {
    [[ -n $run_pid ]] && kill -9 "$run_pid" 2>/dev/null || true
    rm -rf "$fast"
    scripts/servers stop "$servers" >/dev/null 2>&1 || true
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
metric() { curl -s "$1/metrics" | awk -v name="$2" '$1 == name { print $2 }'; }
done_count() {  # BASE TOKEN
    curl -s -H "Authorization: Bearer $2" "$1/v1/summary" | python3 -c 'import json, sys; print(json.load(sys.stdin)["jobs"]["done"])'
}

declare -A walls
measure() {  # NAME CLIENTS
    local name="$1" attached="$2" port base token i started ended
    rm -rf "$fast" && mkdir -p "$fast/queue.d"
    port=$(free_port)
    base="http://127.0.0.1:$port"
    (cd "$fast" && exec "$transferd" run --queue queue.d --watch --listen "127.0.0.1:$port" --jobs 16 --quiet) > "$work/run.log" 2>&1 &
    run_pid=$!
    for ((i = 0; i < 100; i++)); do curl -sf "$base/metrics" >/dev/null 2>&1 && break; sleep 0.05; done
    token=$(cat "$fast/queue.d/.transferd/api.token")
    local -a client_pids=()
    for ((i = 0; i < attached; i++)); do
        curl -sN -H "Authorization: Bearer $token" "$base/v1/events" > "$fast/client$i.sse" &
        client_pids+=($!)
    done
    for ((i = 0; i < 200; i++)); do [[ $(metric "$base" transferd_event_streams) == "$attached" ]] && break; sleep 0.02; done
    [[ $(metric "$base" transferd_event_streams) == "$attached" ]] || { echo "bench: $attached clients did not attach" >&2; exit 1; }

    cp "$list" "$fast/queue.d/.control.urls.tmp"
    started=$(date +%s.%N)
    mv "$fast/queue.d/.control.urls.tmp" "$fast/queue.d/control.urls"
    until [[ $(done_count "$base" "$token") == "$count" ]]; do sleep 0.01; done
    ended=$(date +%s.%N)
    kill -INT "$run_pid"
    wait "$run_pid" 2>/dev/null || true
    run_pid=""
    for pid in "${client_pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    for ((i = 0; i < attached; i++)); do
        local finished
        finished=$(grep -c '"event":"finished"' "$fast/client$i.sse" || true)
        [[ $finished -ge $count ]] || { echo "bench: client $i saw $finished finished events, not $count" >&2; exit 1; }
        ! grep -q '^event: reset' "$fast/client$i.sse" || { echo "bench: client $i was told to reset" >&2; exit 1; }
    done
    walls[$name]+="$(awk -v a="$started" -v b="$ended" 'BEGIN { printf "%.4f", b - a }') "
}

names=("no event stream" "$clients event streams")
for ((r = 0; r < runs; r++)); do
    measure "${names[0]}" 0
    measure "${names[1]}" "$clients"
    echo "bench: round $((r + 1)) of $runs done" >&2
done

base=$(median <<< "${walls[${names[0]}]}")
printf '\n1,000 x 256 KiB through transferd run --listen --jobs 16, files on tmpfs, median of %d runs, %s\n\n' "$runs" "$(date -u +%Y-%m-%d)"
printf '| %-20s | %8s | %10s | %s |\n' case "wall s" "vs none" "all runs"
printf '|%s|%s|%s|%s|\n' "----------------------" "----------" "------------" "------"
for name in "${names[@]}"; do
    w=$(median <<< "${walls[$name]}")
    awk -v n="$name" -v w="$w" -v b="$base" -v all="${walls[$name]}" 'BEGIN { printf "| %-20s | %8.3f | %9.3fx | %s |\n", n, w, w / b, all }'
done

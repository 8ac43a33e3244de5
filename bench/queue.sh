#!/usr/bin/env bash
# Queue benchmark: many small downloads through `transferd run` (every job's
# state persisted) against curl --parallel and aria2c -i on the same files
# from the same local nginx, then ingest and run of 10,000 queued jobs.
#
#   bench/queue.sh [RUNS]     (default 3; the median is shown)
#
# The tools run in turns, each into a folder of its own that nothing was
# deleted from: ext4 will not reuse an inode freed in the last minute or so
# (recently_deleted), and a file created after `rm -rf` of the last run's
# thousand files made the allocator skip past all of them. That timed the
# filesystem (it made every tool about twice as slow, curl most), not the tools.
# The runs' folders are removed at the end. Every run's output is compared with
# the source.
set -euo pipefail

runs="${1:-3}"
# shellcheck source=bench/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

count=1000
small=$(make_small_files "$count")
list="$work/small.list"
cfg="$work/small.curl"
: > "$list"; : > "$cfg"
for ((i = 0; i < count; i++)); do
    echo "$TRANSFERD_TEST_HTTP/small/f$i.bin" >> "$list"
    printf 'url = "%s/small/f%d.bin"\noutput = "f%d.bin"\n' "$TRANSFERD_TEST_HTTP" "$i" "$i" >> "$cfg"
done

runs_dir="$work/runs"
rm -rf "$runs_dir"
leftovers+=("$runs_dir")
run_id=0
fresh() { run_id=$((run_id + 1)); out="$runs_dir/$run_id"; mkdir -p "$out"; }
verify() {
    local n
    n=$(find "$out" -maxdepth 2 -name 'f*.bin' | wc -l)
    [[ $n -eq $count ]] || { echo "bench: $1 left $n files, not $count" >&2; exit 1; }
    for ((i = 0; i < count; i++)); do
        cmp -s "$small/f$i.bin" "$(find "$out" -maxdepth 2 -name "f$i.bin" | head -1)" || { echo "bench: $1: f$i.bin differs" >&2; exit 1; }
    done
}

declare -A times peaks
measure() {  # NAME DIR COMMAND...
    local name="$1" dir="$2"; shift 2
    sync
    warm_page_cache 300
    (cd "$dir" && /usr/bin/time -f "%e %M" -o "$work/time" "$@" >/dev/null 2>"$work/stderr") || {
        echo "bench: $name failed" >&2; cat "$work/stderr" >&2; exit 1; }
    verify "$name"
    read -r seconds kib < "$work/time"
    times[$name]+="$seconds "
    [[ ${peaks[$name]:-0} -ge $kib ]] || peaks[$name]=$kib
}

# transferd's queue makes every finished file durable (syncfs) before it
# records the job done; curl and aria2c leave the data in the page cache.
# "curl ... && sync" is the same work with the same durability.
names=("curl --parallel --parallel-max 16" "curl --parallel ... && sync" "aria2c -i -j16" "transferd run --jobs 16")
for ((r = 0; r < runs; r++)); do
    fresh; measure "${names[0]}" "$out" curl -s --parallel --parallel-max 16 -K "$cfg"
    fresh; measure "${names[1]}" "$out" sh -c "curl -s --parallel --parallel-max 16 -K '$cfg' && sync"
    fresh; measure "${names[2]}" "$out" aria2c -q -i "$list" -j16 --file-allocation=none -d "$out"
    fresh; mkdir -p "$out/queue/queue.d"
    sed 's|$| out|' "$list" > "$out/queue/queue.d/small.urls"
    measure "${names[3]}" "$out/queue" "$transferd" run --queue queue.d --root "$out" --jobs 16 --quiet
    echo "bench: round $((r + 1)) of $runs done" >&2
done

base=$(median <<< "${times[${names[0]}]}")
printf '\n%d x 256 KiB from nginx on 127.0.0.1, median of %d runs, %s\n\n' "$count" "$runs" "$(date -u +%Y-%m-%d)"
printf '| %-36s | %7s | %8s | %10s | %12s |\n' case "wall s" "files/s" "vs curl" "peak RSS MiB"
printf '|%s|%s|%s|%s|%s|\n' "--------------------------------------" "---------" "----------" "------------" "--------------"
for name in "${names[@]}"; do
    w=$(median <<< "${times[$name]}")
    awk -v n="$name" -v w="$w" -v b="$base" -v r="${peaks[$name]}" -v c="$count" 'BEGIN {
        printf "| %-36s | %7.2f | %8.0f | %9.2fx | %12.1f |\n", n, w, c / w, b / w, r / 1024 }'
done

# 10,000 job files: ingest, then run every job (4 KiB files).
many=10000
tiny="$TRANSFERD_TEST_WWW/tiny"
mkdir -p "$tiny"
[[ -f $tiny/t.bin ]] || head -c 4096 /dev/urandom > "$tiny/t.bin"
big="$work/many"
rm -rf "$big" && mkdir -p "$big/queue.d"
for ((i = 0; i < many; i++)); do
    printf '{"id": "j%d", "url": "%s/tiny/t.bin", "dest": "out/%d/t%d.bin"}\n' "$i" "$TRANSFERD_TEST_HTTP" "$((i / 1000))" "$i" \
        > "$big/queue.d/job$i.json"
done
sync
/usr/bin/time -f "%e %M" -o "$work/time" "$transferd" ingest --queue "$big/queue.d" >/dev/null
read -r ingest_s ingest_kib < "$work/time"
/usr/bin/time -f "%e %M" -o "$work/time" "$transferd" run --queue "$big/queue.d" --jobs 16 --quiet
read -r run_s run_kib < "$work/time"
done_files=$(find "$big/out" -name 't*.bin' | wc -l)
[[ $done_files -eq $many ]] || { echo "bench: the 10,000-job run left $done_files files" >&2; exit 1; }
printf '\n10,000 job files (one 4 KiB download each)\n\n'
printf '| %-34s | %7s | %9s | %12s |\n' step "wall s" "per s" "peak RSS MiB"
printf '|%s|%s|%s|%s|\n' "------------------------------------" "---------" "-----------" "--------------"
awk -v w="$ingest_s" -v r="$ingest_kib" -v c="$many" 'BEGIN { printf "| %-34s | %7.2f | %9.0f | %12.1f |\n", "transferd ingest (10,000 files)", w, c / w, r / 1024 }'
awk -v w="$run_s" -v r="$run_kib" -v c="$many" 'BEGIN { printf "| %-34s | %7.2f | %9.0f | %12.1f |\n", "transferd run (10,000 queued jobs)", w, c / w, r / 1024 }'

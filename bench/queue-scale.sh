#!/usr/bin/env bash
# Queue scale: a queue of 10,000, 100,000 and 1,000,000 jobs in the queue
# folder's SQLite store (1,000 URLs per .urls file). For each size: ingest
# time and peak RSS, `status` (the summed-up view of a large queue) time and
# RSS, `status --json` (every job, streamed) time and RSS, and the ingest of
# the same URLs as one .urls file (over 8 MiB: read a piece at a time); then
# `run` jobs/s for 10,000 downloads of 4 KiB from the local nginx.
#
#   bench/queue-scale.sh [SIZES...]     (default: 10000 100000 1000000)
#   BENCH_STORE=postgres bench/queue-scale.sh [SIZES...]
#       the same steps on the servers' PostgreSQL (--store, a fresh database per
#       size), with the server's CPU seconds per job for ingest and status
#

# The URLs of the larger queues are not fetched (127.0.0.1:9, the discard
# port): those sizes measure the store and the commands, not transfers.
set -euo pipefail
# shellcheck source=bench/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

sizes=("$@")
((${#sizes[@]})) || sizes=(10000 100000 1000000)
scale="$work/scale"
rm -rf "$scale"
leftovers+=("$scale")

timed() {  # LABEL COMMAND...: prints "LABEL SECONDS KIB"
    local label=$1; shift
    /usr/bin/time -f "%e %M" -o "$work/time" "$@" >"$work/out" 2>"$work/stderr" || {
        echo "bench: $label failed" >&2; cat "$work/stderr" >&2; exit 1; }
    read -r seconds kib < "$work/time"
    printf '| %-36s | %8.2f | %10.1f |\n' "$label" "$seconds" "$(awk -v k="$kib" 'BEGIN { print k / 1024 }')"
}

store=${BENCH_STORE:-sqlite}
case $store in sqlite|postgres) ;; *) echo "bench: BENCH_STORE is sqlite or postgres, not $store" >&2; exit 2 ;; esac

# postgres_cpu: the CPU seconds PostgreSQL's processes have used so far (every process of its
# group, and the backends that ended, which their parent has reaped).
postgres_cpu() {
    local group member total=0 ticks
    group=$(cat "$servers/pids/postgres.pid")
    ticks=$(getconf CLK_TCK)
    for member in $(pgrep -g "$group"); do
        # utime stime cutime cstime are fields 14-17 of /proc/PID/stat (after the command's parentheses).
        total=$((total + $(sed -E 's/^.*\) //' "/proc/$member/stat" 2>/dev/null | awk '{ print $12 + $13 + $14 + $15 }' || echo 0)))
    done
    awk -v t="$total" -v k="$ticks" 'BEGIN { printf "%.2f", t / k }'
}

# with_store LABEL SIZE COMMAND...: `timed`, and on PostgreSQL the server's CPU ms per job too.
with_store() {
    local label=$1 size=$2 before after; shift 2
    if [[ $store == sqlite ]]; then timed "$label" "$@"; return; fi
    before=$(postgres_cpu)
    timed "$label" "$@" "--store" "$store_url"
    after=$(postgres_cpu)
    awk -v a="$after" -v b="$before" -v n="$size" -v l="$label" 'BEGIN { printf "|   %-34s | %8.3f | %10s |\n", "DB CPU ms per job", (a - b) * 1000 / n, "" }'
}

echo "store: $store"
printf '\n| %-36s | %8s | %10s |\n' "step" "seconds" "peak MiB"
printf '|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..38})" "----------" "------------"
for size in "${sizes[@]}"; do
    dir="$scale/q$size"
    mkdir -p "$dir/queue.d"
    python3 - "$dir/queue.d" "$size" <<'PY'
import sys
folder, size = sys.argv[1], int(sys.argv[2])
for f in range((size + 999) // 1000):
    with open(f"{folder}/batch{f:05d}.urls", "w") as out:
        for i in range(min(1000, size - f * 1000)):
            out.write(f"http://127.0.0.1:9/f{f}/{i}.bin out/{f}/\n")
PY
    [[ $store == postgres ]] && store_url=$(fresh_postgres_store "scale_$size")
    (cd "$dir" && with_store "ingest $size jobs" "$size" "$transferd" ingest --queue queue.d)
    (cd "$dir" && with_store "status ($size jobs)" "$size" "$transferd" status --queue queue.d)
    (cd "$dir" && with_store "status --json ($size jobs)" "$size" "$transferd" status --queue queue.d --json)
    lines=$(wc -l < "$work/out")
    [[ $lines -eq $size ]] || { echo "bench: status --json printed $lines lines for $size jobs" >&2; exit 1; }
    rm -rf "$dir"
    # The same URLs as one list.
    mkdir -p "$dir/queue.d"
    python3 - "$dir/queue.d" "$size" <<'PY'
import sys
folder, size = sys.argv[1], int(sys.argv[2])
with open(f"{folder}/all.urls", "w") as out:
    for n in range(size):
        out.write(f"http://127.0.0.1:9/f{n // 1000}/{n % 1000}.bin out/{n // 1000}/\n")
PY
    list_mib=$(awk -v b="$(stat -c %s "$dir/queue.d/all.urls")" 'BEGIN { printf "%.0f", b / 1048576 }')
    [[ $store == postgres ]] && store_url=$(fresh_postgres_store "scale_list_$size")
    (cd "$dir" && with_store "ingest one list ($size, $list_mib MiB)" "$size" "$transferd" ingest --queue queue.d)
    [[ -f $dir/queue.d/accepted/all.urls ]] || { echo "bench: the list of $size was not accepted" >&2; cat "$work/out" "$work/stderr" >&2; exit 1; }
    rm -rf "$dir"
done

# run: 10,000 downloads of 4 KiB from nginx, every job's state persisted.
count=10000
files="$TRANSFERD_TEST_WWW/scale4k"
mkdir -p "$files"
for ((i = 0; i < count; i++)); do [[ -f $files/f$i.bin ]] || head -c 4096 /dev/urandom > "$files/f$i.bin"; done
dir="$scale/run"
mkdir -p "$dir/queue.d"
for ((f = 0; f < count / 1000; f++)); do
    for ((i = f * 1000; i < (f + 1) * 1000; i++)); do echo "$TRANSFERD_TEST_HTTP/scale4k/f$i.bin out/"; done > "$dir/queue.d/batch$f.urls"
done
[[ $store == postgres ]] && store_url=$(fresh_postgres_store "scale_run")
(cd "$dir" && with_store "run $count jobs of 4 KiB (--jobs 64)" "$count" "$transferd" run --queue queue.d --jobs 64 --quiet)
read -r seconds _ < "$work/time"
done_files=$(find "$dir/out" -name 'f*.bin' | wc -l)
[[ $done_files -eq $count ]] || { echo "bench: the run left $done_files files, not $count" >&2; exit 1; }
awk -v s="$seconds" -v c="$count" 'BEGIN { printf "\nrun: %.0f jobs/s\n", c / s }'

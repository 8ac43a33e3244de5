#!/usr/bin/env bash
# The cost of watching: the same 1,000-job queue run (1,000 × 256 KiB from
# the local nginx, --jobs 16) with the live terminal view, with plain lines,
# with --json and with --quiet, in turns; CPU time (user + system) of each
# and its ratio to --quiet. The live view needs a terminal: every mode runs
# inside `script`, which gives it a pseudo-terminal (80×24 defaults). The
# queue and its downloads live on a tmpfs (/dev/shm), so the disk's noise
# (ext4 inode allocation dominates a run of 1,000 small files) does not
# drown the cost being measured; CPU time comes from getrusage (microseconds).
#
#   bench/progress.sh [RUNS]     (default 7; the median is shown)
set -euo pipefail

runs="${1:-7}"
# shellcheck source=bench/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

count=1000
small=$(make_small_files "$count")
list="$work/progress.list"
: > "$list"
for ((i = 0; i < count; i++)); do echo "$TRANSFERD_TEST_HTTP/small/f$i.bin out" >> "$list"; done

fast="/dev/shm/transferd-bench-progress"
[[ -d /dev/shm ]] || fast="$work/pq-disk"
trap 'rm -rf "$fast"; scripts/servers stop "$servers" >/dev/null 2>&1 || true' EXIT
# Runs a command and writes "CPU-seconds wall-seconds" of it (and its children) to $work/time.
cat > "$work/rusage.py" <<'PY'
import resource, subprocess, sys, time
start = time.monotonic()
code = subprocess.call(sys.argv[2:])
wall = time.monotonic() - start
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
with open(sys.argv[1], "w") as out:
    out.write(f"{usage.ru_utime + usage.ru_stime:.4f} {wall:.4f}\n")
sys.exit(code)
PY

declare -A cpus walls
measure() {  # NAME FLAGS...
    local name="$1"; shift
    rm -rf "$fast" && mkdir -p "$fast/queue.d"
    cp "$list" "$fast/queue.d/small.urls"
    # script(1) runs the command on a pseudo-terminal, so stdout is a tty.
    (cd "$fast" && script -qec "python3 '$work/rusage.py' '$work/time' '$transferd' run queue.d --jobs 16 $*" \
        /dev/null > "$work/screen" 2>&1) || { echo "bench: $name failed" >&2; tail -20 "$work/screen" >&2; exit 1; }
    local done_files
    done_files=$(find "$fast/out" -name 'f*.bin' | wc -l)
    [[ $done_files -eq $count ]] || { echo "bench: $name left $done_files files" >&2; exit 1; }
    read -r cpu wall < "$work/time"
    cpus[$name]+="$cpu "
    walls[$name]+="$wall "
}

names=("--quiet" "live view (tty)" "--progress plain" "--json")
flags=("--quiet" "" "--progress plain" "--json")
for ((r = 0; r < runs; r++)); do
    for i in "${!names[@]}"; do measure "${names[$i]}" "${flags[$i]}"; done
    echo "bench: round $((r + 1)) of $runs done" >&2
done

base=$(median <<< "${cpus[--quiet]}")
printf '\n1,000 x 256 KiB through transferd run --jobs 16 on a pseudo-terminal, files on tmpfs, median of %d runs, %s\n\n' "$runs" "$(date -u +%Y-%m-%d)"
printf '| %-20s | %10s | %14s | %8s |\n' output "CPU s" "CPU vs quiet" "wall s"
printf '|%s|%s|%s|%s|\n' "----------------------" "------------" "----------------" "----------"
for name in "${names[@]}"; do
    c=$(median <<< "${cpus[$name]}")
    w=$(median <<< "${walls[$name]}")
    awk -v n="$name" -v c="$c" -v b="$base" -v w="$w" 'BEGIN { printf "| %-20s | %10.3f | %13.3fx | %8.3f |\n", n, c, c / b, w }'
done

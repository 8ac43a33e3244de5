#!/usr/bin/env bash
# Download benchmark: transferd (both backends, one and eight connections)
# against curl -o, curl -o && sync, aria2c -x8 and wget2 on the same local
# nginx, in one run, rounds interleaved (every case once per round).
#
#   bench/download.sh [ROUNDS]     (default 10 rounds; medians are shown)
#
# Prints the median wall time, throughput, the ratios to `curl -o` and to
# `curl -o && sync` (higher is faster), the spread (slowest / fastest run)
# and peak RSS (from /usr/bin/time). Every output file is compared with the
# source before it counts. transferd's files are durable when it exits
# (fdatasync before the rename); curl's and aria2c's are not, which the
# `curl -o && sync` row prices in.
#
# Also, once each:
#   * the "slow disk" rows: a benchmark build of transferd whose writes are
#     throttled to 100 MiB/s (-DTRANSFERD_SLOW_DISK), to show memory stays
#     bounded when the disk is slower than the network;
#   * kill -9 at a random moment of a full-speed download, then the same
#     command: what nginx sent beyond the file's size (re-fetched bytes plus
#     what sat in the killed connections' socket buffers).
# Every timed run starts right after a page-cache warm-up (warm_page_cache in
# common.sh: this VM's host takes freed memory back, and writing into memory it
# took back is up to 20x slower). The first two rows are not tools but the
# machine's own state in each round: `dd` writing 1 GiB into the page cache,
# and `dd conv=fdatasync` writing it to the disk, the floor under any download
# that is durable when it ends, and the spread that download inherits from
# the disk.
set -euo pipefail

rounds="${1:-10}"
# shellcheck source=bench/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
out="$work/out"
echo "bench: building the slow-disk variant" >&2
swift build -c release --product transferd --static-swift-stdlib --scratch-path "$work/build-slowdisk" -Xswiftc -DTRANSFERD_SLOW_DISK >/dev/null
slow="$(swift build -c release --product transferd --static-swift-stdlib --scratch-path "$work/build-slowdisk" --show-bin-path)/transferd"

source_file="$TRANSFERD_TEST_WWW/1g.bin"
[[ -f $source_file ]] || head -c 1073741824 /dev/urandom > "$source_file"
url="$TRANSFERD_TEST_HTTP/1g.bin"
size=1073741824

declare -A times peaks
names=()
# once NAME COMMAND...: one timed run of COMMAND, which must write $out/f.
once() {
    local name="$1"; shift
    rm -rf "$out" && mkdir -p "$out"
    sync
    warm_page_cache 1100
    /usr/bin/time -f "%e %M" -o "$work/time" "$@" >/dev/null 2>"$work/stderr" || {
        echo "bench: '$name' failed:" >&2; cat "$work/stderr" >&2; exit 1; }
    [[ $name == dd* ]] || cmp -s "$source_file" "$out/f" || { echo "bench: '$name' produced a wrong file" >&2; exit 1; }
    read -r seconds kib < "$work/time"
    printf 'bench: %-40s %6.2f s\n' "$name" "$seconds" >&2
    [[ -v "times[$name]" ]] || names+=("$name")
    times[$name]+="$seconds "
    peaks[$name]+="$kib "
}

cases() {
    once "dd 1 GiB to the page cache (control)" dd if=/dev/zero of="$out/f" bs=1M count=1024
    once "dd 1 GiB to disk, fdatasync (control)" dd if=/dev/zero of="$out/f" bs=1M count=1024 conv=fdatasync
    once "curl -o"                            curl -s -o "$out/f" "$url"
    once "curl -o && sync"                    sh -c 'curl -s -o "$1" "$2" && sync "$1"' sh "$out/f" "$url"
    once "aria2c -x8 -s8 -k1M"                aria2c -q -x8 -s8 -k1M --file-allocation=none -d "$out" -o f "$url"
    once "wget2 --max-threads=8"              wget2 -q --max-threads=8 --chunk-size=128M -O "$out/f" "$url"
    once "transferd curl x1"                  "$transferd" get "$url" -o "$out/f" -q
    once "transferd curl x8"                  "$transferd" get "$url" -o "$out/f" -q -c 8
    once "transferd urlsession x1"            "$transferd" get "$url" -o "$out/f" -q --transport urlsession
    once "transferd urlsession x8"            "$transferd" get "$url" -o "$out/f" -q --transport urlsession -c 8
}
for ((round = 1; round <= rounds; round++)); do
    echo "bench: round $round of $rounds" >&2
    cases
done
once "transferd curl x1, slow disk"       "$slow" get "$url" -o "$out/f" -q
once "transferd urlsession x1, slow disk" "$slow" get "$url" -o "$out/f" -q --transport urlsession

# kill -9 at a random moment between 0.10 and 0.44 s (a full-speed download takes 0.6-0.8 s).
log="$servers/logs/access.log"
refetch() {  # CONNECTIONS
    rm -rf "$out" && mkdir -p "$out"
    local start pid
    start=$(stat -c %s "$log")
    "$transferd" get "$url" -o "$out/f" -q -c "$1" >/dev/null 2>&1 & pid=$!
    sleep "0.$(( RANDOM % 35 + 10 ))"
    kill -9 "$pid"; wait "$pid" 2>/dev/null || true
    [[ -f $out/f ]] && { echo "bench: the download ended before the kill" >&2; return 1; }
    # nginx logs a killed connection's request once it sees the connection gone.
    sleep 0.3
    local killed_end on_disk=0
    killed_end=$(stat -c %s "$log")
    [[ -f $out/f.transferd-part ]] && on_disk=$(bytes_on_disk "$out/f.transferd-part")
    "$transferd" get "$url" -o "$out/f" -q -c "$1" >/dev/null
    cmp -s "$source_file" "$out/f" || { echo "bench: kill -9 and resume produced a wrong file" >&2; exit 1; }
    sleep 0.3
    kill_split "$start" "$killed_end" "$on_disk"
}
# bytes_on_disk PART: how many bytes of the partial file already hold the source's bytes (in 4 KiB
# blocks; the source is random, so an unwritten block, zeros or a hole, never matches).
bytes_on_disk() {
    python3 - "$source_file" "$1" <<'PY'
import sys
block, written = 4096, 0
with open(sys.argv[1], "rb") as source, open(sys.argv[2], "rb") as part:
    while b := part.read(1 << 20):
        a = source.read(len(b))
        written += len(b) if a == b else sum(len(b[i:i + block]) for i in range(0, len(b), block) if a[i:i + block] == b[i:i + block])
print(written)
PY
}
# kill_split LOG_START KILLED_END ON_DISK: splits what nginx sent beyond the file's size after a kill
# (the log's bytes from LOG_START to KILLED_END are the killed run's requests, the rest the resumed
# run's; ON_DISK what the killed run had written) into four MiB figures: beyond the size in all;
# fetched twice, bytes the killed run had written that the resumed run was sent again; range-split
# overshoot, bytes a connection was sent past the point where its range was cut for another
# connection (a download without a kill has it too); never written, bytes the killed run received
# but had not written (its sockets' buffers and what it held). A run's bytes are the union of its
# requests' ranges as far as nginx sent each ($http_range in the log).
kill_split() {
    python3 - "$log" "$1" "$2" "$3" "$size" <<'PY'
import sys
log, start, killed_end, written, size = sys.argv[1], *map(int, sys.argv[2:])

def sent(lines):
    """(bytes sent in all, bytes of the file covered): the sum and the union of the requests' spans."""
    spans = []
    for fields in (line.split() for line in lines):
        if len(fields) < 6 or fields[1] != b"/1g.bin":
            continue
        first = int(fields[5].strip(b'"')[6:].split(b"-")[0]) if fields[5].startswith(b'"bytes=') else 0
        spans.append((first, first + int(fields[4])))
    covered = reach = 0
    for a, b in sorted(spans):
        covered += max(0, b - max(a, reach))
        reach = max(reach, b)
    return sum(b - a for a, b in spans), covered

with open(log, "rb") as f:
    text = f.read()
killed_sum, killed_union = sent(text[start:killed_end].splitlines())
resumed_sum, resumed_union = sent(text[killed_end:].splitlines())
m = 1048576
print("%.1f %.1f %.1f %.1f" % ((killed_sum + resumed_sum - size) / m, (resumed_union - (size - written)) / m,
                               (killed_sum - killed_union + resumed_sum - resumed_union) / m, (killed_union - written) / m))
PY
}
declare -A extra refetched overshoot unwritten
for c in 1 8; do
    for ((i = 0; i < 5; i++)); do
        if split=$(refetch "$c"); then
            read -r all twice over lost <<< "$split"
            extra[$c]+="$all "; refetched[$c]+="$twice "; overshoot[$c]+="$over "; unwritten[$c]+="$lost "
            echo "bench: kill -9, $c connection(s): $all MiB beyond the size ($twice fetched twice, $over range-split overshoot, $lost never written)" >&2
        fi
    done
done

spread() { tr ' ' '\n' | grep -v '^$' | sort -n | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%.2f", hi / lo }'; }
base=$(median <<< "${times[curl -o]}")
durable=$(median <<< "${times[curl -o && sync]}")
printf '\n1 GiB from nginx on 127.0.0.1, medians of %d interleaved rounds, %s\n\n' "$rounds" "$(date -u +%Y-%m-%d)"
printf '| %-38s | %6s | %6s | %10s | %15s | %6s | %8s |\n' case "wall s" "MiB/s" "vs curl -o" "vs curl && sync" spread "RSS MiB"
printf '|%s|%s|%s|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..40})" "--------" "--------" "------------" "-----------------" "--------" "----------"
for name in "${names[@]}"; do
    wall=$(median <<< "${times[$name]}")
    peak=$(tr ' ' '\n' <<< "${peaks[$name]}" | grep -v '^$' | sort -n | tail -1)
    awk -v n="$name" -v w="$wall" -v b="$base" -v d="$durable" -v r="$peak" -v s="$size" -v sp="$(spread <<< "${times[$name]}")" 'BEGIN {
        printf "| %-38s | %6.2f | %6.0f | %9.2fx | %14.2fx | %6s | %8.1f |\n", n, w, s / 1048576 / w, b / w, d / w, sp, r / 1024 }'
done
printf '\nkill -9 at a random moment, then the same command, 5 kills each: MiB nginx sent beyond the size,\n'
printf 'split into bytes the killed run had written and was sent again, range-split overshoot (sent past\n'
printf 'a cut range; a download without a kill has it too) and bytes the killed run received but never wrote\n\n'
per_connection() { awk -v m="$1" -v c="$2" 'BEGIN { printf "%.1f", m / c }'; }
for c in 1 8; do
    printf '  %d connection(s): beyond the size %s (median %s MiB, %s per connection)\n' "$c" "${extra[$c]:-none}" \
        "$(median <<< "${extra[$c]:-0}")" "$(per_connection "$(median <<< "${extra[$c]:-0}")" "$c")"
    printf '      fetched twice %s (median %s MiB, %s per connection); overshoot %s (median %s MiB); never written %s (median %s MiB)\n' \
        "${refetched[$c]:-none}" "$(median <<< "${refetched[$c]:-0}")" "$(per_connection "$(median <<< "${refetched[$c]:-0}")" "$c")" \
        "${overshoot[$c]:-none}" "$(median <<< "${overshoot[$c]:-0}")" "${unwritten[$c]:-none}" "$(median <<< "${unwritten[$c]:-0}")"
done

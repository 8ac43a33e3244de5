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
# The first row is not a tool: `dd` writing 1 GiB into the page cache, the
# machine's own state in each round (on this VM its speed varies up to 10x
# from run to run, which every row shares).
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
    local killed_end on_disk
    killed_end=$(stat -c %s "$log")
    on_disk=0
    [[ -f $out/f.part ]] && on_disk=$(bytes_on_disk "$out/f.part")
    "$transferd" get "$url" -o "$out/f" -q -c "$1" >/dev/null
    cmp -s "$source_file" "$out/f" || { echo "bench: kill -9 and resume produced a wrong file" >&2; exit 1; }
    sleep 0.3
    # Sent to the killed run (A), to the resumed one (B), and what the killed run had written (D):
    # A + B - size beyond the size in all; B - (size - D) fetched twice; A - D never written
    # (the killed connections' socket buffers and whatever the process held unwritten).
    local sent_killed sent_resumed
    sent_killed=$(head -c "$killed_end" "$log" | tail -c +"$((start + 1))" | awk '$2 == "/1g.bin" { sent += $5 } END { print sent + 0 }')
    sent_resumed=$(tail -c +"$((killed_end + 1))" "$log" | awk '$2 == "/1g.bin" { sent += $5 } END { print sent + 0 }')
    awk -v a="$sent_killed" -v b="$sent_resumed" -v d="$on_disk" -v s="$size" \
        'BEGIN { m = 1048576; printf "%.1f %.1f %.1f", (a + b - s) / m, (b - (s - d)) / m, (a - d) / m }'
}
# bytes_on_disk PART: how many bytes of the partial file already hold the source's bytes (in 4 KiB
# blocks; the source is random, so an unwritten block, zeros or a hole, never matches).
bytes_on_disk() {
    python3 - "$source_file" "$1" <<'PY'
import sys
block = 4096
written = 0
with open(sys.argv[1], "rb") as source, open(sys.argv[2], "rb") as part:
    while True:
        a, b = source.read(1 << 20), part.read(1 << 20)
        if not b:
            break
        if a[:len(b)] == b:
            written += len(b)
            continue
        for i in range(0, len(b), block):
            if a[i:i + block] == b[i:i + block]:
                written += len(b[i:i + block])
print(written)
PY
}
declare -A extra refetched unwritten
for c in 1 8; do
    for ((i = 0; i < 5; i++)); do
        if split=$(refetch "$c"); then
            read -r all twice lost <<< "$split"
            extra[$c]+="$all "; refetched[$c]+="$twice "; unwritten[$c]+="$lost "
            echo "bench: kill -9, $c connection(s): $all MiB beyond the size ($twice fetched twice, $lost sent but never written)" >&2
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
printf 'split into bytes the killed run had written and the resumed run fetched again, and bytes sent\n'
printf 'to the killed run that it never wrote (its sockets'"'"' receive buffers and what it held unwritten)\n\n'
per_connection() { awk -v m="$1" -v c="$2" 'BEGIN { printf "%.1f", m / c }'; }
for c in 1 8; do
    printf '  %d connection(s): beyond the size %s (median %s MiB, %s per connection)\n' "$c" "${extra[$c]:-none}" \
        "$(median <<< "${extra[$c]:-0}")" "$(per_connection "$(median <<< "${extra[$c]:-0}")" "$c")"
    printf '      fetched twice %s (median %s MiB, %s per connection); never written %s (median %s MiB)\n' \
        "${refetched[$c]:-none}" "$(median <<< "${refetched[$c]:-0}")" "$(per_connection "$(median <<< "${refetched[$c]:-0}")" "$c")" \
        "${unwritten[$c]:-none}" "$(median <<< "${unwritten[$c]:-0}")"
done

#!/usr/bin/env bash
# Rate-limit benchmark: how closely a download keeps the rate it was given,
# transferd (curl backend, one and four connections) against curl
# --limit-rate and aria2c --max-download-limit on the same local nginx.
#
#   bench/rate.sh [ROUNDS]     (default 3 rounds; medians are shown)
#
# Each case downloads a file of 10 s worth of bytes at the rate and samples
# what the tool has read from its sockets at 1 s and 6 s (ss: bytes received
# less the receive queue): the rate over that 5 s window (after the
# first second, when every tool spends its initial burst) divided by the rate
# asked. 1.00 is exact; the goal for transferd is within 5 % (0.95-1.05) for
# rates of 256 KiB/s and more. aria2c's limit is per file, over all its
# connections; curl's is per transfer (one connection).
set -euo pipefail

rounds="${1:-3}"
# shellcheck source=bench/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
out="$work/rate"
leftovers+=("$out")

# taken PORT: the bytes the processes connected to the server's PORT have read from their
# sockets so far: for each such socket, what the kernel received (tcp_info bytes_received)
# less what still waits in its receive queue (Recv-Q). Measured in the kernel, so the same
# for every tool whatever its file looks like mid-download (a segmented download's size is
# not its bytes), and exact: the socket buffers (several MB on loopback) are not counted.
taken() {
    ss -tinH state established "( dport = :$1 )" | awk '
        /^[0-9]/ { queued = $1; next }
        { if (match($0, /bytes_received:[0-9]+/)) total += substr($0, RSTART + 15, RLENGTH - 15) - queued }
        END { print total + 0 }'
}

# window RATE_BYTES CMD...: runs CMD in the background in $out, samples what it has read
# from nginx at 1 s and 6 s, stops it, and prints that rate divided by RATE_BYTES.
window() {
    local rate=$1
    shift
    rm -rf "$out" && mkdir -p "$out"
    (cd "$out" && exec "$@" >/dev/null 2>&1) &
    local pid=$!
    sleep 1
    local a b
    a=$(taken "$port")
    sleep 5
    b=$(taken "$port")
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    awk -v a="$a" -v b="$b" -v r="$rate" 'BEGIN { printf "%.3f", (b - a) / 5 / r }'
}

port=${TRANSFERD_TEST_HTTP##*:}
declare -A results
rates=("256K:262144" "1M:1048576" "8M:8388608")
for spec in "${rates[@]}"; do
    name=${spec%%:*} bytes=${spec#*:}
    size=$((bytes * 10))
    head -c "$size" /dev/urandom > "$TRANSFERD_TEST_WWW/rate-$name.bin"
done
for ((round = 1; round <= rounds; round++)); do
    for spec in "${rates[@]}"; do
        name=${spec%%:*} bytes=${spec#*:}
        for tool in td1 td4 curl aria2c; do
            url="$TRANSFERD_TEST_HTTP/rate-$name.bin"
            case $tool in
                td1) command=("$transferd" get "$url" -o f.bin --limit-rate "$name" -q) ;;
                td4) command=("$transferd" get "$url" -o f.bin --limit-rate "$name" -c 4 -q) ;;
                curl) command=(curl -s -o f.bin --limit-rate "$name" "$url") ;;
                aria2c) command=(aria2c -q -x4 -s4 --min-split-size=1M --allow-overwrite=true
                                 --max-download-limit="$name" -o f.bin "$url") ;;
            esac
            results["$tool $name"]+=" $(window "$bytes" "${command[@]}")"
        done
    done
    echo "bench: round $round of $rounds" >&2
done
rm -f "$TRANSFERD_TEST_WWW"/rate-*.bin

printf '\nRate kept over the 5 s after the first second (measured / asked), medians of %d rounds, %s\n\n' \
    "$rounds" "$(date -u +%Y-%m-%d)"
printf '| %-34s | %8s | %8s | %8s |\n' case 256K 1M 8M
printf '|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..36})" "----------" "----------" "----------"
for tool in "td1:transferd --limit-rate, 1 connection" "td4:transferd --limit-rate, 4 connections" \
            "curl:curl --limit-rate" "aria2c:aria2c -x4 --max-download-limit"; do
    key=${tool%%:*} label=${tool#*:}
    printf '| %-34s |' "$label"
    for spec in "${rates[@]}"; do
        printf ' %8s |' "$(echo "${results["$key ${spec%%:*}"]}" | median)"
    done
    printf '\n'
done

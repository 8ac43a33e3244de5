#!/usr/bin/env bash
# Download benchmark: transferd (both backends, one and eight connections)
# against curl -o, aria2c -x8 and wget2 on the same local nginx, in one run.
#
#   bench/download.sh [RUNS]     (default 3 runs per case; the median is shown)
#
# Prints wall time, throughput, the ratio to `curl -o` (higher is faster) and
# peak RSS (from /usr/bin/time). Every output file is compared with the
# source before it counts. The "slow disk" rows use a benchmark build of
# transferd whose writes are throttled to 100 MiB/s (-DTRANSFERD_SLOW_DISK),
# to show memory stays bounded when the disk is slower than the network.
set -euo pipefail

runs="${1:-3}"
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

# run NAME COMMAND...: times COMMAND (which must write $out/f) $runs times.
declare -A wall rss
names=()
run() {
    local name="$1"; shift
    local times=() peaks=() i
    for ((i = 0; i < runs; i++)); do
        rm -rf "$out" && mkdir -p "$out"
        sync
        /usr/bin/time -f "%e %M" -o "$work/time" "$@" >/dev/null 2>"$work/stderr" || {
            echo "bench: '$name' failed:" >&2; cat "$work/stderr" >&2; exit 1; }
        cmp -s "$source_file" "$out/f" || { echo "bench: '$name' produced a wrong file" >&2; exit 1; }
        read -r seconds kib < "$work/time"
        times+=("$seconds"); peaks+=("$kib")
    done
    wall[$name]=$(printf '%s\n' "${times[@]}" | sort -n | sed -n "$(( (runs + 1) / 2 ))p")
    rss[$name]=$(printf '%s\n' "${peaks[@]}" | sort -n | tail -1)
    names+=("$name")
    printf 'bench: %-44s %6.2f s\n' "$name" "${wall[$name]}" >&2
}

run "curl -o"                            curl -s -o "$out/f" "$url"
run "aria2c -x8 -s8 -k1M"                aria2c -q -x8 -s8 -k1M --file-allocation=none -d "$out" -o f "$url"
run "wget2 --max-threads=8 (2-core ceiling)" wget2 -q --max-threads=8 --chunk-size=128M -O "$out/f" "$url"
run "transferd curl x1"                  "$transferd" get "$url" -o "$out/f" -q
run "transferd curl x8"                  "$transferd" get "$url" -o "$out/f" -q -c 8
run "transferd urlsession x1"            "$transferd" get "$url" -o "$out/f" -q --transport urlsession
run "transferd urlsession x8"            "$transferd" get "$url" -o "$out/f" -q --transport urlsession -c 8
run "transferd curl x1, slow disk"       "$slow" get "$url" -o "$out/f" -q
run "transferd urlsession x1, slow disk" "$slow" get "$url" -o "$out/f" -q --transport urlsession

base="${wall[curl -o]}"
printf '\n1 GiB from nginx on 127.0.0.1, median of %d runs, %s\n\n' "$runs" "$(date -u +%Y-%m-%d)"
printf '| %-40s | %7s | %9s | %12s | %13s |\n' case "wall s" "MiB/s" "vs curl -o" "peak RSS MiB"
printf '|%s|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..42})" "---------" "-----------" "--------------" "---------------"
for name in "${names[@]}"; do
    awk -v n="$name" -v w="${wall[$name]}" -v b="$base" -v r="${rss[$name]}" -v s="$size" 'BEGIN {
        printf "| %-40s | %7.2f | %9.0f | %11.2fx | %13.1f |\n", n, w, s / 1048576 / w, b / w, r / 1024 }'
done

#!/usr/bin/env bash
# Mirrors benchmark: one file from three mirrors of different speeds, transferd against
# aria2c with the same three URIs, on the local nginx, rounds interleaved; then a metalink
# whose first mirror serves wrong bytes (piece hashes), once each.
#
#   bench/mirrors.sh [ROUNDS]     (default 3 rounds; medians are shown)
#
# The three mirrors of 1g.bin are nginx locations with a cap per connection: /brisk/ (256 MB/s)
# on http://127.0.0.1, /slow/ (16 MB/s) on http://localhost and /crawl/ (1 MB/s) on
# https://localhost. They are three host:port pairs, so aria2c's --max-connection-per-server
# (-x2) and transferd's --connections-per-mirror 2 allow the same six connections.
# Prints the median time, the ratio to aria2c (higher is faster), peak RSS, and how much of the
# file each mirror served in transferd's last run. Every output file is compared with the source.
set -euo pipefail

rounds="${1:-3}"
# shellcheck source=bench/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
out="$work/out"
leftovers+=("$out")

source_file="$TRANSFERD_TEST_WWW/1g.bin"
[[ -f $source_file ]] || head -c 1073741824 /dev/urandom > "$source_file"
http_port="${TRANSFERD_TEST_HTTP##*:}"
https_port="${TRANSFERD_TEST_HTTPS##*:}"
brisk="http://127.0.0.1:$http_port/brisk/1g.bin"
slow="http://localhost:$http_port/slow/1g.bin"
crawl="https://localhost:$https_port/crawl/1g.bin"

declare -A times peaks
names=()
# once NAME FILE COMMAND...: one timed run of COMMAND, which must write FILE equal to the source.
once() {
    local name="$1" expected="$2"; shift 2
    rm -rf "$out" && mkdir -p "$out"
    sync
    warm_page_cache 1100
    /usr/bin/time -f "%e %M" -o "$work/time" "$@" >"$work/stdout" 2>"$work/stderr" || {
        echo "bench: '$name' failed:" >&2; cat "$work/stderr" >&2; exit 1; }
    cmp -s "$expected" "$out/f" || { echo "bench: '$name' produced a wrong file" >&2; exit 1; }
    read -r seconds kib < "$work/time"
    printf 'bench: %-44s %6.2f s\n' "$name" "$seconds" >&2
    [[ -v "times[$name]" ]] || names+=("$name")
    times[$name]+="$seconds "
    peaks[$name]+="$kib "
}

for ((round = 1; round <= rounds; round++)); do
    echo "bench: round $round of $rounds" >&2
    once "aria2c -x2 -s6 -k1M, 3 URIs" "$source_file" \
        aria2c -q -x2 -s6 -k1M --file-allocation=none --ca-certificate="$TRANSFERD_TEST_CA" -d "$out" -o f "$brisk" "$slow" "$crawl"
    once "transferd --mirror x2, curl" "$source_file" \
        "$transferd" get "$brisk" --mirror "$slow" --mirror "$crawl" --connections-per-mirror 2 --cacert "$TRANSFERD_TEST_CA" -o "$out/f"
    cp "$work/stderr" "$work/transferd-shares"
done

# A metalink of a 256 MiB file whose first mirror serves other bytes (8 changed at the start of
# every MiB), piece hashes of 1 MiB: each tool must end with the right file.
lie="$TRANSFERD_TEST_WWW/mirror-bench"
mkdir -p "$lie/good" "$lie/bad"
leftovers+=("$lie")
head -c 268435456 "$source_file" > "$lie/good/f"
python3 - "$lie/good/f" "$lie/bad/f" "$work/f.meta4" "http://127.0.0.1:$http_port/mirror-bench" <<'PY'
import hashlib, sys
good, bad, meta, base = sys.argv[1:]
data = bytearray(open(good, "rb").read())
piece = 1 << 20
hashes = "".join(f"<hash>{hashlib.sha256(data[i:i + piece]).hexdigest()}</hash>" for i in range(0, len(data), piece))
whole = hashlib.sha256(data).hexdigest()
for i in range(0, len(data), piece):
    data[i:i + 8] = b"XXXXXXXX"
open(bad, "wb").write(data)
open(meta, "w").write(f'<?xml version="1.0" encoding="UTF-8"?>\n<metalink xmlns="urn:ietf:params:xml:ns:metalink">'
                      f'<file name="f"><size>{len(data)}</size><hash type="sha-256">{whole}</hash>'
                      f'<pieces length="{piece}" type="sha-256">{hashes}</pieces>'
                      f'<url priority="1">{base}/bad/f</url><url priority="2">{base}/good/f</url></file></metalink>')
PY
once "aria2c -M, a lying mirror" "$lie/good/f" aria2c -q -x2 -s4 -k1M --file-allocation=none -d "$out" -M "$work/f.meta4"
once "transferd --metalink, a lying mirror" "$lie/good/f" "$transferd" get --metalink "$work/f.meta4" -o "$out/f"
cp "$work/stderr" "$work/transferd-lie"

reference=$(echo "${times["aria2c -x2 -s6 -k1M, 3 URIs"]}" | median)
printf '\n%-44s %9s %8s %12s\n' "1 GiB from 3 mirrors (metalink: 256 MiB)" "median s" "ratio" "peak RSS"
for name in "${names[@]}"; do
    t=$(echo "${times[$name]}" | median)
    p=$(echo "${peaks[$name]}" | median)
    ratio="-"
    [[ $name == *"3 URIs"* || $name == *"--mirror"* ]] && ratio=$(awk -v a="$reference" -v b="$t" 'BEGIN { printf "%.2fx", a / b }')
    printf '%-44s %9.2f %8s %9.0f MiB\n' "$name" "$t" "$ratio" "$((p / 1024))"
done
echo
echo "transferd's last run, where the bytes came from:"
grep -E '^  (http|https)://' "$work/transferd-shares" || true
echo "transferd with the lying mirror:"
grep -E 'dropped|^  (http|https)://|fetching' "$work/transferd-lie" || true

#!/usr/bin/env bash
# Upload benchmark, in one run against the same local servers:
#   * 1 GiB S3 multipart upload to moto: transferd (both backends) against
#     `aws s3 cp` and `rclone copyto`;
#   * 1,000 x 256 KiB to moto: transferd (a queue of s3-upload jobs) against
#     `aws s3 cp --recursive` and `rclone copy --transfers 16`;
#   * a streamed 1 GiB PUT to nginx: transferd against `curl -T`.
# Prints wall time, ratios and peak RSS (median of RUNS, default 3).
#
#   bench/upload.sh [RUNS]
set -euo pipefail

runs="${1:-3}"
# shellcheck source=bench/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
python3 -c 'import awscli' 2>/dev/null || python3 -m pip install --quiet --root-user-action=ignore awscli >/dev/null

export AWS_ACCESS_KEY_ID="$TRANSFERD_TEST_S3_ACCESS_KEY" AWS_SECRET_ACCESS_KEY="$TRANSFERD_TEST_S3_SECRET_KEY"
export AWS_REGION="$TRANSFERD_TEST_S3_REGION" AWS_DEFAULT_REGION="$TRANSFERD_TEST_S3_REGION" AWS_ENDPOINT_URL="$TRANSFERD_TEST_S3"
export HOME="$work/home" && mkdir -p "$HOME"
export RCLONE_CONFIG_MOTO_TYPE=s3 RCLONE_CONFIG_MOTO_PROVIDER=Other RCLONE_CONFIG_MOTO_ENDPOINT="$TRANSFERD_TEST_S3"
export RCLONE_CONFIG_MOTO_ACCESS_KEY_ID="$AWS_ACCESS_KEY_ID" RCLONE_CONFIG_MOTO_SECRET_ACCESS_KEY="$AWS_SECRET_ACCESS_KEY"
export RCLONE_CONFIG_MOTO_REGION="$AWS_REGION" RCLONE_CONFIG_MOTO_FORCE_PATH_STYLE=true
# The machine may point AWS_CA_BUNDLE at a system file; rclone 1.60 fails on it over http.
unset AWS_CA_BUNDLE
aws="python3 -m awscli"

big="$TRANSFERD_TEST_WWW/1g.bin"
[[ -f $big ]] || head -c 1073741824 /dev/urandom > "$big"
smalldir="$work/upload-small"
if [[ ! -f $smalldir/f999.bin ]]; then
    mkdir -p "$smalldir"
    for ((i = 0; i < 1000; i++)); do head -c 262144 /dev/urandom > "$smalldir/f$i.bin"; done
fi
$aws s3 mb s3://bench >/dev/null 2>&1 || true
bigsum=$(md5sum < "$big" | cut -d' ' -f1)

declare -A times peaks
names=()
measure() {  # NAME CHECK COMMAND...   (CHECK: a command that verifies the result)
    local name="$1" check="$2"; shift 2
    /usr/bin/time -f "%e %M" -o "$work/time" "$@" >/dev/null 2>"$work/stderr" || {
        echo "bench: $name failed" >&2; tail -5 "$work/stderr" >&2; exit 1; }
    eval "$check" || { echo "bench: $name: wrong result" >&2; exit 1; }
    read -r seconds kib < "$work/time"
    [[ " ${names[*]} " == *" $name "* ]] || names+=("$name")
    times[$name]+="$seconds "
    [[ ${peaks[$name]:-0} -ge $kib ]] || peaks[$name]=$kib
    printf 'bench: %-46s %6.2f s\n' "$name" "$seconds" >&2
}
object_ok() { [[ $($aws s3api head-object --bucket bench --key "$1" --query ContentLength --output text) == 1073741824 ]]; }
count_ok() { [[ $($aws s3 ls "s3://bench/$1/" | wc -l) -eq 1000 ]]; }

for ((r = 0; r < runs; r++)); do
    measure "aws s3 cp (1 GiB)" "object_ok aws.bin" $aws s3 cp "$big" s3://bench/aws.bin --quiet
    # rclone skips an object it finds unchanged: delete it so every round uploads.
    rclone deletefile moto:bench/rclone.bin 2>/dev/null || true
    measure "rclone copyto (1 GiB)" "object_ok rclone.bin" rclone copyto "$big" moto:bench/rclone.bin
    measure "transferd put, curl (1 GiB)" "object_ok td.bin" "$transferd" put "$big" s3://bench/td.bin -q
    measure "transferd put, urlsession (1 GiB)" "object_ok td-us.bin" "$transferd" put "$big" s3://bench/td-us.bin -q --transport urlsession

    $aws s3 rm --recursive --quiet s3://bench/aws-small/ || true
    measure "aws s3 cp --recursive (1000 x 256 KiB)" "count_ok aws-small" $aws s3 cp --recursive --quiet "$smalldir" s3://bench/aws-small/
    rclone purge moto:bench/rclone-small 2>/dev/null || true
    measure "rclone copy --transfers 16 (1000 x 256 KiB)" "count_ok rclone-small" rclone copy --transfers 16 "$smalldir" moto:bench/rclone-small
    rm -rf "$work/upq" && mkdir -p "$work/upq/queue.d"
    {
        printf '{"version": 1, "jobs": [\n'
        for ((i = 0; i < 1000; i++)); do
            printf '%s{"type": "s3-upload", "url": "s3://bench/td-small/f%d.bin", "source": "%s/f%d.bin"}\n' "$([[ $i -gt 0 ]] && echo ,)" "$i" "$smalldir" "$i"
        done
        printf ']}\n'
    } > "$work/upq/queue.d/uploads.json"
    measure "transferd run --jobs 16 (1000 x 256 KiB)" "count_ok td-small" "$transferd" run --queue "$work/upq/queue.d" --root "$work" --jobs 16 --quiet

    rm -rf "$servers/uploads/bench"
    measure "curl -T (1 GiB PUT to nginx)" "cmp -s $big $servers/uploads/bench/curl.bin" curl -s -T "$big" "$TRANSFERD_TEST_HTTP/upload/bench/curl.bin"
    measure "transferd put (1 GiB PUT to nginx)" "cmp -s $big $servers/uploads/bench/td.bin" "$transferd" put "$big" "$TRANSFERD_TEST_HTTP/upload/bench/td.bin" -q
    echo "bench: round $((r + 1)) of $runs done" >&2
done

printf '\nUploads on 127.0.0.1 (moto %s, nginx), median of %d runs, %s\n\n' "$(python3 -c 'import moto; print(moto.__version__)')" "$runs" "$(date -u +%Y-%m-%d)"
printf '| %-46s | %7s | %12s | %12s |\n' case "wall s" "vs anchor" "peak RSS MiB"
printf '|%s|%s|%s|%s|\n' "------------------------------------------------" "---------" "--------------" "--------------"
row() {  # NAME ANCHOR
    local w a
    w=$(median <<< "${times[$1]}")
    a=$(median <<< "${times[$2]}")
    awk -v n="$1" -v w="$w" -v a="$a" -v r="${peaks[$1]}" 'BEGIN { printf "| %-46s | %7.2f | %11.2fx | %12.1f |\n", n, w, a / w, r / 1024 }'
}
for name in "aws s3 cp (1 GiB)" "rclone copyto (1 GiB)" "transferd put, curl (1 GiB)" "transferd put, urlsession (1 GiB)"; do row "$name" "aws s3 cp (1 GiB)"; done
for name in "aws s3 cp --recursive (1000 x 256 KiB)" "rclone copy --transfers 16 (1000 x 256 KiB)" "transferd run --jobs 16 (1000 x 256 KiB)"; do row "$name" "aws s3 cp --recursive (1000 x 256 KiB)"; done
for name in "curl -T (1 GiB PUT to nginx)" "transferd put (1 GiB PUT to nginx)"; do row "$name" "curl -T (1 GiB PUT to nginx)"; done
echo
echo "(vs anchor: the anchor's wall time divided by this row's; above 1 is faster. Anchors: aws s3 cp, aws s3 cp --recursive, curl -T.)"

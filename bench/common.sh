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
trap 'scripts/servers stop "$servers" >/dev/null 2>&1 || true' EXIT
scripts/servers stop "$servers" >/dev/null 2>&1 || true
scripts/servers start "$servers" >/dev/null
# shellcheck disable=SC1091
source "$servers/env"

echo "bench: building transferd (release)" >&2
swift build -c release >/dev/null
transferd="$(swift build -c release --show-bin-path)/transferd"

#!/usr/bin/env bash
# Run every dpone test against real servers, with one command:
#
#   scripts/test.sh [cargo test args...]
#
# Starts a private set of servers (see scripts/services.sh), exports their
# URLs, runs `cargo test --workspace --all-targets "$@"`, then checks that a
# plain (non-test) build ignores every test switch
# (scripts/checks/release_switches.sh), and always stops the servers it
# started, exiting with the first failure's exit code.
#
# DPONE_TEST_CMD, if set, is run with bash instead of cargo: a hook for
# checking this script itself (e.g. DPONE_TEST_CMD='env | grep DPONE_TEST_').
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SERVICES=$ROOT/scripts/services.sh

# A run killed with SIGKILL never gets to stop its servers. Such runs left
# their state folder behind with a dead owner: stop their servers now.
for dir in "${TMPDIR:-/tmp}"/dpone-services.*; do
  [ -f "$dir/owner.pid" ] || continue
  kill -0 "$(cat "$dir/owner.pid")" 2>/dev/null && continue
  echo "test.sh: stopping servers left behind by a dead run in $dir" >&2
  DPONE_SERVICES_DIR=$dir "$SERVICES" stop || true
  rm -f "$dir/owner.pid"
  rmdir "$dir" 2>/dev/null || true
done

# A folder of our own, so that this run neither reuses nor stops servers that
# someone started with `scripts/services.sh start`.
DPONE_SERVICES_DIR=$(mktemp -d "${TMPDIR:-/tmp}/dpone-services.XXXXXX")
export DPONE_SERVICES_DIR
echo $$ >"$DPONE_SERVICES_DIR/owner.pid"

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  "$SERVICES" stop || echo "test.sh: warning: stopping the servers failed" >&2
  rm -f "$DPONE_SERVICES_DIR/owner.pid"
  rmdir "$DPONE_SERVICES_DIR" 2>/dev/null || true
  exit "$rc"
}
trap cleanup EXIT
# Exit through the EXIT trap with the conventional 128+signal codes.
trap 'exit 130' INT
trap 'exit 143' TERM

"$SERVICES" start
# shellcheck source=/dev/null
source "$DPONE_SERVICES_DIR/env.sh"

ch_version() { curl -sS --max-time 5 "$1/?query=SELECT%20version()" || echo "version unknown"; }
pg_version=$(psql "$DPONE_TEST_POSTGRES_URL" -tAc "SHOW server_version" 2>/dev/null || echo "version unknown")
cat <<EOF

================================ test servers ================================
ClickHouse $(ch_version "$DPONE_TEST_CLICKHOUSE_URL")  DPONE_TEST_CLICKHOUSE_URL=$DPONE_TEST_CLICKHOUSE_URL
ClickHouse $(ch_version "$DPONE_TEST_CLICKHOUSE_OLD_URL")  DPONE_TEST_CLICKHOUSE_OLD_URL=$DPONE_TEST_CLICKHOUSE_OLD_URL
PostgreSQL ${pg_version%% *}  DPONE_TEST_POSTGRES_URL=$DPONE_TEST_POSTGRES_URL
DPONE_TEST_REQUIRE_SERVERS=$DPONE_TEST_REQUIRE_SERVERS
==============================================================================

EOF

cd "$ROOT"
# Not `exec`: the EXIT trap must run afterwards. set -e makes a failing
# command end the script with its exit code, which cleanup passes on.
if [ -n "${DPONE_TEST_CMD:-}" ]; then
  bash -c "$DPONE_TEST_CMD"
else
  # A hung test must fail CI, not stall it: the whole suite gets 50 minutes.
  timeout --foreground 3000 cargo test --workspace --all-targets "$@"
  # Test switches exist only in test builds: a plain build must ignore them.
  "$ROOT/scripts/checks/release_switches.sh"
fi

#!/usr/bin/env bash
# The dpone users build has no test switches. `cargo test` builds the binary
# with the `failpoints` feature (failpoints, a short lease, injected target
# faults); a plain build must ignore all of them. This builds the plain
# binary and runs the quick start with every switch set: it must succeed.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
cargo build --quiet -p dpone-cli --bin dpone
dir=$(mktemp -d "${TMPDIR:-/tmp}/dpone-release-switches.XXXXXX")
trap 'rm -rf "$dir"' EXIT
set +e
DPONE_FAILPOINT=plan.after_persist DPONE_FAILPOINT_SLEEP=staging.after_ack:60000 DPONE_TEST_LEASE_TTL_MS=1 \
  DPONE_TARGET_FAULTS=publish:permanent:1 DPONE_TEST_LEGACY_AUTHORITY=1 "${CARGO_TARGET_DIR:-target}/debug/dpone" quickstart --dir "$dir" --format json >"$dir/out.json" 2>"$dir/err.txt"
rc=$?
set -e
status=$(python3 -c 'import json, sys
docs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(",".join(str((d.get("result") or {}).get("status", d.get("status"))) for d in docs))' "$dir/out.json" 2>/dev/null || echo unreadable)
if [ "$rc" -ne 0 ] || [ "$status" != succeeded ]; then
  echo "release_switches: FAILED: a plain build honoured a test switch (exit $rc, status $status)" >&2
  cat "$dir/err.txt" >&2
  exit 1
fi
echo "release_switches: ok (a plain build ignores DPONE_FAILPOINT*, DPONE_TEST_LEASE_TTL_MS, DPONE_TEST_LEGACY_AUTHORITY and DPONE_TARGET_FAULTS)"

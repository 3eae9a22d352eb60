#!/usr/bin/env bash
# Benchmark: `dpone audit` (docs/audit.md) against a full transfer of the
# same window. The 30-day window of changed_delivery.sh (window30_lib.sh:
# narrow rows id bigint, ts, v bigint, s text of 32 characters; lookback
# P30D, chunk_interval P1D: 30 chunks), per route:
#
#   pg_to_clickhouse  PostgreSQL dpone_bench.cd_src_<ROWS> -> ClickHouse
#                     dpone_bench.cd_audit_pgch PARTITION BY toYYYYMMDD(ts) ORDER BY id
#   ch_to_postgres    ClickHouse dpone_bench.cd_chsrc -> PostgreSQL
#                     dpone_bench.cd_audit_chpg (plain table, index on ts)
#
#   scripts/bench/audit.sh
#
# Per route, each timed with /usr/bin/time (wall seconds, peak RSS) and the
# servers' CPU seconds:
#   transfer    `dpone run` of the window into an empty target
#   audit       `dpone audit` of the window right after: must exit 0 (equal)
#   audit_diff  `dpone audit --key id` after one value of the target changed
#               (day 15): must exit 1 and name exactly that row on both sides
# The ratio audit / transfer is the goal's (at most 0.5).
#
# Environment (all optional; see pg_to_clickhouse.sh for the shared ones):
#   ROWS           rows of the window (default 30000000)
#   ROUTES         default "pg_to_clickhouse ch_to_postgres"
#   PARALLELISM    dpone chunk parallelism of the transfer (default 2)
#   KEEP_TABLES=1  keep the bench tables (default: drop them at the end; a kept
#                  PostgreSQL source is reused by a later run of the same ROWS,
#                  here or by changed_delivery.sh)
#   PG_URL, CH_URL, SKIP_BUILD, DPONE_SOURCE, OUT_DIR, KEEP_TMP, IDLE_WAIT_MAX, IDLE_BUSY_PCT, QUIESCE_QUIET_S
#
# Output: target/bench/audit-<UTC timestamp>.json and a Markdown summary on
# stdout.
set -euo pipefail

BENCH_NAME=audit
# shellcheck source=scripts/bench/bench_lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/bench_lib.sh"

ROWS=${ROWS:-30000000}
ROUTES=${ROUTES:-pg_to_clickhouse ch_to_postgres}
PARALLELISM=${PARALLELISM:-2}
positive_int ROWS PARALLELISM

bench_init
bench_build
# shellcheck source=scripts/bench/window30_lib.sh
. "$BENCH_DIR/window30_lib.sh"

# The changed row: the middle of day 15.
CHANGED_ID=$(mid_id 15 "$ROWS")

# expect_audit CASE EXIT: the audit in $TMP/last.out exited EXIT (the
# measure's status) with the status that goes with it; for exit 1, its
# only differences are CHANGED_ID on each side.
expect_audit() {
  local route=$1 case=$2 want=$3 got=$4
  [ "$got" = "$want" ] || die "$route/$case: dpone audit exited $got, expected $want: $(head -c 3000 "$TMP/last.out") $(tail -c 2000 "$TMP/last.err")"
  python3 - "$TMP/last.out" "$want" "$CHANGED_ID" <<'EOF' || die "$route/$case: unexpected audit report"
import json, sys
doc = json.load(open(sys.argv[1]))
want, changed = int(sys.argv[2]), sys.argv[3]
if want == 0:
    assert doc["status"] == "equal", doc["status"]
else:
    assert doc["status"] == "different", doc["status"]
    found = sorted((d["side"], d["row"]["key"][0], d["count"]) for d in doc["differences"])
    assert found == [("source_only", changed, 1), ("target_only", changed, 1)], found
EOF
  cp "$TMP/last.out" "$TMP/$route/$case.json"
}

for route in $ROUTES; do
  rm -rf "${TMP:?}/$route"
  case $route in
    pg_to_clickhouse)
      seed_pg_source "$ROWS" >"$TMP/$route.seed"
      chq "DROP TABLE IF EXISTS dpone_bench.cd_audit_pgch SYNC" >/dev/null
      chq "CREATE TABLE dpone_bench.cd_audit_pgch (id Int64, ts DateTime64(6, 'UTC'), v Int64, s String) \
ENGINE = MergeTree PARTITION BY toYYYYMMDD(ts) ORDER BY id" >/dev/null
      LOOKBACK=P30D CHUNK_INTERVAL=P1D write_window_manifest postgres BENCH_PG clickhouse BENCH_CH "$route" "$PGSRC" "" cd_audit_pgch
      change_target() {
        chq "ALTER TABLE dpone_bench.cd_audit_pgch UPDATE v = v + 1 WHERE id = $CHANGED_ID SETTINGS mutations_sync = 2" >/dev/null
      }
      ;;
    ch_to_postgres)
      seed_ch_source "$ROWS" >"$TMP/$route.seed"
      pgq "DROP TABLE IF EXISTS dpone_bench.cd_audit_chpg" >/dev/null
      pgq "CREATE TABLE dpone_bench.cd_audit_chpg (id bigint NOT NULL, ts timestamptz NOT NULL, v bigint NOT NULL, s text NOT NULL)" >/dev/null
      pgq "CREATE INDEX ON dpone_bench.cd_audit_chpg (ts)" >/dev/null
      LOOKBACK=P30D CHUNK_INTERVAL=P1D write_window_manifest clickhouse BENCH_CH postgres BENCH_PG "$route" cd_chsrc "" cd_audit_chpg
      change_target() {
        pgq "UPDATE dpone_bench.cd_audit_chpg SET v = v + 1 WHERE id = $CHANGED_ID" >/dev/null
      }
      ;;
    *) die "unknown route $route" ;;
  esac
  manifest=$TMP/$route/manifest.yaml
  pg_checkpoint
  [ "$route" = pg_to_clickhouse ] && bump_source_xid
  drop_ch_backups
  measure "$route" dpone_transfer 1 -- "$DPONE" run "$manifest" --interval-end "$CD_INTERVAL_END" --format json ||
    die "$route: dpone run failed: $(head -c 3000 "$TMP/last.out") $(tail -c 2000 "$TMP/last.err")"
  [ "$(dpone_status)" = succeeded ] || die "$route: status $(dpone_status)"
  pg_checkpoint
  rc=0
  measure "$route" audit 1 -- "$DPONE" audit "$manifest" --interval-end "$CD_INTERVAL_END" --format json || rc=$?
  expect_audit "$route" audit 0 "$rc"
  change_target
  pg_checkpoint
  rc=0
  measure "$route" audit_diff 1 -- "$DPONE" audit "$manifest" --interval-end "$CD_INTERVAL_END" --format json --key id || rc=$?
  expect_audit "$route" audit_diff 1 "$rc"
  drop_ch_backups
done

bench_meta \
  "parallelism=$PARALLELISM" "routes=\"$ROUTES\"" "rows=$ROWS" "changed_id=$CHANGED_ID" \
  "seed={$(for r in $ROUTES; do printf '"%s": "%s", ' "$r" "$(cat "$TMP/$r.seed")"; done | sed 's/, $//')}" \
  "window={\"column\": \"ts\", \"start\": \"2026-08-10T00:00:00Z\", \"end\": \"2026-09-09T00:00:00Z\", \"chunk_interval\": \"P1D\"}" \
  >"$TMP/meta.json"
OUT=$OUT_DIR/audit-$STAMP.json
python3 - "$TMP/meta.json" "$RESULTS" "$OUT" "$TMP" <<'EOF'
import json, sys
meta, results, out, tmp = sys.argv[1:]
meta = json.load(open(meta))
samples = [json.loads(l) for l in open(results) if l.strip()]
by = {(s["dataset"], s["case"]): s for s in samples}
routes = meta["routes"].split()
summary = {}
for r in routes:
    t, a, d = by[(r, "dpone_transfer")], by[(r, "audit")], by[(r, "audit_diff")]
    report = json.load(open(f"{tmp}/{r}/audit.json"))
    diff = json.load(open(f"{tmp}/{r}/audit_diff.json"))
    summary[r] = {
        "transfer_s": t["wall_s"], "audit_s": a["wall_s"], "audit_diff_s": d["wall_s"],
        "ratio": round(a["wall_s"] / t["wall_s"], 3), "ratio_diff": round(d["wall_s"] / t["wall_s"], 3),
        "audit_seconds": report["seconds"], "audit_diff_seconds": diff["seconds"],
        "peak_rss_mib": {c: round(by[(r, c)]["rss_kib"] / 1024, 1) for c in ("dpone_transfer", "audit", "audit_diff")},
        "server_cpu_s": {c: [by[(r, c)]["pg_server_cpu_s"], by[(r, c)]["ch_server_cpu_s"]] for c in ("dpone_transfer", "audit", "audit_diff")},
    }
json.dump({"meta": meta, "samples": samples, "summary": summary}, open(out, "w"), indent=2)
git = meta.get("git", {})
print(f"## dpone audit vs full transfer ({meta['rows']} rows, 30 daily chunks), commit {git.get('commit')}{' (dirty)' if git.get('dirty') else ''}\n")
print("| route | transfer s | audit s | ratio | audit after one change s | ratio | peak RSS MiB (audit) | server CPU s PG / CH (audit) |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for r, s in summary.items():
    cpu = s["server_cpu_s"]["audit"]
    print(f"| {r} | {s['transfer_s']:.2f} | {s['audit_s']:.2f} | {s['ratio']:.2f}x | {s['audit_diff_s']:.2f} | {s['ratio_diff']:.2f}x | {s['peak_rss_mib']['audit']} | {cpu[0]} / {cpu[1]} |")
EOF

if [ "${KEEP_TABLES:-0}" != 1 ]; then
  log "dropping the bench tables (KEEP_TABLES=1 keeps them)"
  chq "DROP TABLE IF EXISTS dpone_bench.cd_audit_pgch SYNC" >/dev/null
  chq "DROP TABLE IF EXISTS dpone_bench.cd_chsrc SYNC" >/dev/null
  drop_ch_backups
  pgq "DROP TABLE IF EXISTS dpone_bench.$PGSRC" >/dev/null
  pgq "DROP TABLE IF EXISTS dpone_bench.cd_audit_chpg" >/dev/null
fi
log "done in $(($(date +%s) - START_EPOCH)) s; results in $OUT"

#!/usr/bin/env bash
# Benchmark: changed-window delivery (issue 30, docs/changed-delivery.md).
# Does a rerun of a `delivery: changed` window replace cost only what
# changed? A 30-day window (lookback P30D, chunk_interval P1D: 30 chunks) of
# narrow rows (id bigint, ts, v bigint, s text of 32 characters), spread
# evenly over the window's 30 days, per route:
#
#   pg_to_clickhouse  PostgreSQL dpone_bench.cd_src_<ROWS> (primary key id, index
#                     on ts) -> ClickHouse dpone_bench.cd_pgch
#                     PARTITION BY toYYYYMMDD(ts) ORDER BY id
#   ch_to_postgres    ClickHouse dpone_bench.cd_chsrc PARTITION BY
#                     toYYYYMMDD(ts) ORDER BY id -> PostgreSQL
#                     dpone_bench.cd_chpg (plain table, index on ts, the
#                     default publication delete_insert)
#
#   scripts/bench/changed_delivery.sh
#
# Per route, each a `dpone run` timed with /usr/bin/time (wall seconds,
# peak RSS), with a fresh state store and an empty target:
#   first    delivery: changed, no records yet: every chunk is transferred
#   nochange a rerun, nothing changed at the source
#   changed3 a rerun after three changes at the source: an update of one row
#            in day 12, a delete of one row in day 3, a late row inserted in
#            day 27 (ClickHouse: `ALTER TABLE .. UPDATE .. IN PARTITION ID`
#            with mutations_sync = 2, `DELETE FROM .. IN PARTITION ID` with
#            lightweight_deletes_sync = 2, an INSERT)
#   all      (FORCED_ALL=1) `--delivery all`: every chunk transferred again
#
# TARGET_LAYOUT=unpartitioned (PostgreSQL -> ClickHouse only, issue 43):
# the target is `ORDER BY id` without a partition key, so carrying a chunk
# would copy its rows; the change is one update in day 12 (`changed1`),
# after which every chunk must be transferred (`carry_costly`), and the
# `all` run follows with the same rows. Goal: changed1 at most 1.0x all.
# After each run the target's window must equal the source's in count() and
# sum(v) (the update changes v), and the staged chunks of nochange and
# changed3 must be exactly {} and {3, 12, 27}.
#
# Environment (all optional; see pg_to_clickhouse.sh for the shared ones):
#   ROWS           rows of the PostgreSQL source's window (default 30000000)
#   ROWS_CH        rows of the ClickHouse source's window (default ROWS)
#   ROUTES         default "pg_to_clickhouse ch_to_postgres"
#   REPEAT         runs of nochange per route (default 1; each later one is
#                  also a no-change rerun)
#   FORCED_ALL     1 (default): also time a `--delivery all` run at the end
#   PARALLELISM    dpone chunk parallelism (default 2)
#   KEEP_TABLES=1  keep the bench tables (default: drop them at the end; a kept
#                  PostgreSQL source is reused by a later run of the same ROWS)
#   PG_URL, CH_URL, SKIP_BUILD, DPONE_SOURCE, OUT_DIR, KEEP_TMP, IDLE_WAIT_MAX, IDLE_BUSY_PCT, QUIESCE_QUIET_S
#
# Output: target/bench/changed_delivery-<UTC timestamp>.json and a Markdown
# summary on stdout. Goals (issue 30): nochange at most 0.10x of first,
# changed3 at most 0.25x.
set -euo pipefail

BENCH_NAME=changed_delivery
# shellcheck source=scripts/bench/bench_lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/bench_lib.sh"

ROWS=${ROWS:-30000000}
ROWS_CH=${ROWS_CH:-$ROWS}
TARGET_LAYOUT=${TARGET_LAYOUT:-partitioned}
case $TARGET_LAYOUT in
  partitioned) ROUTES=${ROUTES:-pg_to_clickhouse ch_to_postgres} PGCH_ENGINE="PARTITION BY toYYYYMMDD(ts) ORDER BY id" ;;
  unpartitioned) ROUTES=pg_to_clickhouse PGCH_ENGINE="ORDER BY id" FORCED_ALL=1 ;;
  *) echo "TARGET_LAYOUT is partitioned or unpartitioned" >&2; exit 2 ;;
esac
REPEAT=${REPEAT:-1}
FORCED_ALL=${FORCED_ALL:-1}
PARALLELISM=${PARALLELISM:-2}
positive_int ROWS ROWS_CH REPEAT PARALLELISM

bench_init
bench_build
# shellcheck source=scripts/bench/window30_lib.sh
. "$BENCH_DIR/window30_lib.sh"


# --------------------------------------------------------------- changes --

change_pg_source() {
  local n=$1
  pgq "UPDATE dpone_bench.$PGSRC SET v = v + 1 WHERE id = $(mid_id $DAY_UPDATE "$n")" >/dev/null
  pgq "DELETE FROM dpone_bench.$PGSRC WHERE id = $(mid_id $DAY_DELETE "$n")" >/dev/null
  pgq "INSERT INTO dpone_bench.$PGSRC VALUES ($((n + 1)), timestamptz '$CD_START_PG' + interval '$DAY_LATE days 1 minute', 42, md5('late'))" >/dev/null
}

change_ch_source() {
  local n=$1
  chq "ALTER TABLE dpone_bench.cd_chsrc UPDATE v = v + 1 IN PARTITION ID '$PART_UPDATE' WHERE id = $(mid_id $DAY_UPDATE "$n") \
SETTINGS mutations_sync = 2" >/dev/null
  chq "DELETE FROM dpone_bench.cd_chsrc IN PARTITION ID '$PART_DELETE' WHERE id = $(mid_id $DAY_DELETE "$n") \
SETTINGS lightweight_deletes_sync = 2" >/dev/null
  chq "INSERT INTO dpone_bench.cd_chsrc VALUES ($((n + 1)), addMinutes($CD_START_CH + toIntervalDay($DAY_LATE), 1), 42, lower(hex(MD5('late'))))" >/dev/null
}

# ---------------------------------------------------------- exactness ---

# "count sum(v)" of the window.
pg_window() { pgq "SELECT count(*) || ' ' || coalesce(sum(v), 0) FROM dpone_bench.$1 WHERE ts >= '$CD_START_PG' AND ts < '$CD_END_PG'"; }
ch_window() { chq "SELECT count(), sum(v) FROM dpone_bench.$1 WHERE ts >= $CD_START_CH AND ts < $CD_END_CH FORMAT CSV" | tr ',' ' '; }

# check_exact ROUTE CASE: the target's window equals the source's.
check_exact() {
  local route=$1 case=$2 src dst
  if [ "$route" = pg_to_clickhouse ]; then
    src=$(pg_window "$PGSRC")
    dst=$(ch_window cd_pgch)
  else
    src=$(ch_window cd_chsrc)
    dst=$(pg_window cd_chpg)
  fi
  [ "$src" = "$dst" ] || die "$route/$case: the target's window ($dst) differs from the source's ($src) (count sum(v))"
  log "$route/$case: exact (count sum(v): $dst)"
  echo "{\"route\": \"$route\", \"case\": \"$case\", \"source\": \"$src\", \"target\": \"$dst\"}" >>"$TMP/checks.jsonl"
}

# The staged chunk indexes of the run in $TMP/last.out, comma-separated.
staged_of() {
  python3 -c 'import json,sys; print(",".join(str(c["index"]) for c in sorted(json.load(open(sys.argv[1])).get("chunks") or [], key=lambda c: c["index"])))' "$TMP/last.out"
}

# ------------------------------------------------------------- manifests --

write_manifest() {
  local route=$1
  rm -rf "${TMP:?}/$route"
  if [ "$route" = pg_to_clickhouse ]; then
    LOOKBACK=P30D CHUNK_INTERVAL=P1D DELIVERY=changed write_window_manifest postgres BENCH_PG clickhouse BENCH_CH "$route" "$PGSRC" "" cd_pgch
  else
    LOOKBACK=P30D CHUNK_INTERVAL=P1D DELIVERY=changed write_window_manifest clickhouse BENCH_CH postgres BENCH_PG "$route" cd_chsrc "" cd_chpg
  fi
}

# run_case ROUTE CASE REP EXPECT [ARGS...]: one timed run; EXPECT is the
# comma-separated staged chunk indexes it must stage, or "all".
run_case() {
  local route=$1 case=$2 rep=$3 expect=$4 got
  shift 4
  [ "$route" = pg_to_clickhouse ] && bump_source_xid
  drop_ch_backups
  measure "$route" "dpone_$case" "$rep" -- "$DPONE" run "$TMP/$route/manifest.yaml" --interval-end "$CD_INTERVAL_END" --format json "$@" ||
    die "$route/$case: dpone run failed: $(head -c 3000 "$TMP/last.out") $(tail -c 2000 "$TMP/last.err")"
  [ "$(dpone_status)" = succeeded ] || die "$route/$case: status $(dpone_status)"
  cp "$TMP/last.out" "$TMP/$route/$case-$rep.json"
  got=$(staged_of)
  if [ "$expect" = all ]; then
    [ "$(echo "$got" | tr ',' '\n' | grep -c .)" = 30 ] || die "$route/$case: staged [$got], expected all 30 chunks"
  else
    [ "$got" = "$expect" ] || die "$route/$case: staged [$got], expected [$expect]"
  fi
  check_exact "$route" "$case"
}

: >"$TMP/checks.jsonl"
drop_ch_leftovers
for route in $ROUTES; do
  case $route in
    pg_to_clickhouse)
      n=$ROWS
      seed_pg_source "$n" >"$TMP/$route.seed"
      chq "DROP TABLE IF EXISTS dpone_bench.cd_pgch SYNC" >/dev/null
      chq "CREATE TABLE dpone_bench.cd_pgch (id Int64, ts DateTime64(6, 'UTC'), v Int64, s String) \
ENGINE = MergeTree $PGCH_ENGINE" >/dev/null
      ;;
    ch_to_postgres)
      n=$ROWS_CH
      seed_ch_source "$n" >"$TMP/$route.seed"
      pgq "DROP TABLE IF EXISTS dpone_bench.cd_chpg" >/dev/null
      pgq "CREATE TABLE dpone_bench.cd_chpg (id bigint NOT NULL, ts timestamptz NOT NULL, v bigint NOT NULL, s text NOT NULL)" >/dev/null
      pgq "CREATE INDEX ON dpone_bench.cd_chpg (ts)" >/dev/null
      ;;
    *) die "unknown route $route" ;;
  esac
  echo "$n" >"$TMP/$route.rows"
  pg_checkpoint
  write_manifest "$route"
  run_case "$route" first 1 all
  pg_checkpoint
  for ((rep = 1; rep <= REPEAT; rep++)); do
    run_case "$route" nochange "$rep" ""
  done
  if [ "$TARGET_LAYOUT" = unpartitioned ]; then
    # One changed day: carrying the 29 others would copy their rows.
    pgq "UPDATE dpone_bench.$PGSRC SET v = v + 1 WHERE id = $(mid_id $DAY_UPDATE "$n")" >/dev/null
    pg_checkpoint
    run_case "$route" changed1 1 all
  else
    if [ "$route" = pg_to_clickhouse ]; then change_pg_source "$n"; else change_ch_source "$n"; fi
    pg_checkpoint
    run_case "$route" changed3 1 "$EXPECT_CHANGED"
  fi
  if [ "$FORCED_ALL" = 1 ]; then
    pg_checkpoint
    run_case "$route" all 1 all --delivery all
  fi
  drop_ch_backups
done

bench_meta \
  "repeat=$REPEAT" "parallelism=$PARALLELISM" "routes=\"$ROUTES\"" "target_layout=\"$TARGET_LAYOUT\"" \
  "rows={$(for r in $ROUTES; do printf '"%s": %s, ' "$r" "$(cat "$TMP/$r.rows")"; done | sed 's/, $//')}" \
  "seed={$(for r in $ROUTES; do printf '"%s": "%s", ' "$r" "$(cat "$TMP/$r.seed")"; done | sed 's/, $//')}" \
  "window={\"column\": \"ts\", \"start\": \"2026-08-10T00:00:00Z\", \"end\": \"2026-09-09T00:00:00Z\", \"chunk_interval\": \"P1D\", \"delivery\": \"changed\"}" \
  "changes=\"update of one row in day $DAY_UPDATE, delete of one row in day $DAY_DELETE, a late row inserted in day $DAY_LATE\"" \
  >"$TMP/meta.json"
OUT=$OUT_DIR/changed_delivery-$STAMP.json
python3 "$UTIL" report-changed-delivery "$TMP/meta.json" "$RESULTS" "$TMP/checks.jsonl" "$OUT"

if [ "${KEEP_TABLES:-0}" != 1 ]; then
  log "dropping the bench tables (KEEP_TABLES=1 keeps them)"
  chq "DROP TABLE IF EXISTS dpone_bench.cd_pgch SYNC" >/dev/null
  chq "DROP TABLE IF EXISTS dpone_bench.cd_chsrc SYNC" >/dev/null
  drop_ch_backups
  pgq "DROP TABLE IF EXISTS dpone_bench.$PGSRC" >/dev/null
  pgq "DROP TABLE IF EXISTS dpone_bench.cd_chpg" >/dev/null
fi
log "done in $(($(date +%s) - START_EPOCH)) s; results in $OUT"

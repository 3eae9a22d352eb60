#!/usr/bin/env bash
# Benchmark: dpone moving a 7-day window ClickHouse -> PostgreSQL, next to
# raw references on the same machine, data and window.
#
#   scripts/bench/ch_to_postgres.sh
#
# Data: ClickHouse MergeTree tables dpone_bench.ch_narrow and dpone_bench.ch_wide
# (Atomic database dpone_bench), filled once from numbers() (deterministic,
# reused while the row count and seed version, kept in the table comment,
# match); PostgreSQL target tables of the same names in schema dpone_bench with
# the mapped types (`dpone schema type-matrix`) and an index on ts, plus
# scratch tables <name>_copy of the same structure.
#
# Cases per dataset (each timed with /usr/bin/time: wall seconds, peak RSS of
# the measured client process), REPEAT times, interleaved:
#   raw_ch_select   curl "SELECT <cols> FROM t WHERE <window> FORMAT RowBinary" -o /dev/null
#   raw_pg_copy_in  psql "\copy <t>_copy FROM file (FORMAT binary)" into the
#                   truncated scratch table; the file is written once with
#                   COPY (SELECT ... window) TO STDOUT (FORMAT binary) from the
#                   target dpone loaded
#   dpone_empty     dpone run (replace, P7D / P1D) into the truncated target
#   dpone_rerun     dpone run again, replacing the window of the full target
#   dpone_empty_xxh3  dpone_empty with `verification: {digest: xxh3_128}` in the
#                   manifest (manifest-xxh3.yaml), into the truncated target,
#                   measured after dpone_rerun (see SKIP_XXH3)
#   dpone_direct    dpone_empty with `sink.options.postgres.publication: direct`
#                   (manifest-direct.yaml): the chunks COPYed into the target
#                   inside the publishing transaction (see SKIP_DIRECT)
#   dpone_direct_rerun  the same command again, replacing the window of the
#                   full target
# Before every measurement that writes PostgreSQL the script runs CHECKPOINT,
# so that no measurement pays for the previous one's dirty pages, and tables
# are emptied as soon as their case is measured (no autovacuum later).
#
# Environment (all optional; see docs/benchmarks.md):
#   ROWS_NARROW      rows of ch_narrow (default 5000000)
#   ROWS_WIDE        rows of ch_wide (default 1000000)
#   DATASETS         which datasets (default "narrow wide")
#   REPEAT           repetitions per case (default 3)
#   PARALLELISM      dpone chunk parallelism (default 2)
#   SKIP_XXH3=1      do not run dpone_empty_xxh3 (e.g. with a dpone that has no
#                    execution.verification.digest)
#   SKIP_DIRECT=1    do not run dpone_direct / dpone_direct_rerun (e.g. with a
#                    dpone that has no `publication: direct`)
#   PG_URL, CH_URL, IDLE_WAIT_MAX, IDLE_BUSY_PCT, QUIESCE_QUIET_S, DPONE_SOURCE, SKIP_BUILD,
#   OUT_DIR, KEEP_TMP: as in pg_to_clickhouse.sh
#
# Output: target/bench/ch_to_postgres-<UTC timestamp>.json and a Markdown
# summary on stdout; progress on stderr.
set -euo pipefail

BENCH_NAME=ch_to_postgres
# shellcheck source=scripts/bench/bench_lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/bench_lib.sh"

ROWS_NARROW=${ROWS_NARROW:-5000000}
ROWS_WIDE=${ROWS_WIDE:-1000000}
DATASETS=${DATASETS:-narrow wide}
REPEAT=${REPEAT:-3}
PARALLELISM=${PARALLELISM:-2}
SKIP_XXH3=${SKIP_XXH3:-0}
[[ $SKIP_XXH3 == 0 || $SKIP_XXH3 == 1 ]] || die "SKIP_XXH3 must be 0 or 1 (got '$SKIP_XXH3')"
SKIP_DIRECT=${SKIP_DIRECT:-0}
[[ $SKIP_DIRECT == 0 || $SKIP_DIRECT == 1 ]] || die "SKIP_DIRECT must be 0 or 1 (got '$SKIP_DIRECT')"

positive_int ROWS_NARROW ROWS_WIDE REPEAT PARALLELISM
for ds in $DATASETS; do
  [[ $ds == narrow || $ds == wide ]] || die "DATASETS may hold only narrow and wide (got '$ds')"
done

bench_init
bench_build
drop_ch_leftovers

rows_of() { if [ "$1" = narrow ]; then echo "$ROWS_NARROW"; else echo "$ROWS_WIDE"; fi; }

# ----------------------------------------------------------------- schema --

# The columns (ch_source_columns, pg_columns), the rows (ch_select) and the seeding
# (seed_ch_table, ensure_pg_table) are in bench_lib.sh, shared with
# memory.sh ROUTE=ch_to_postgres.

# Creates (or reuses) the ClickHouse source dpone_bench.ch_<ds>.
seed_clickhouse() { seed_ch_table "ch_$1" "$1" "$(rows_of "$1")" "$1" >"$TMP/$1.seed"; }

# Creates (or reuses, when the columns match) the PostgreSQL target
# dpone_bench.ch_<ds> and the scratch table dpone_bench.ch_<ds>_copy.
ensure_postgres() {
  local tbl
  for tbl in "ch_$1" "ch_${1}_copy"; do
    ensure_pg_table "$tbl" "$1" "$1"
  done
}

# write_manifest DATASET [DIGEST FILE [PUBLICATION]]: $TMP/DATASET/manifest.yaml;
# with DIGEST, $TMP/DATASET/FILE, whose `execution` also holds
# `verification: {digest: DIGEST}` (one more line, nothing else differs);
# DIGEST "-" keeps the default digest; with PUBLICATION, the sink also
# holds `options: {postgres: {publication: PUBLICATION}}`.
write_manifest() {
  local ds=$1 dir=$TMP/$1 digest=${2:-} file=manifest.yaml nl=$'\n' vline="" pline=""
  if [ -n "$digest" ]; then
    file=${3:?write_manifest: DIGEST needs a FILE}
    [ "$digest" = - ] || vline="        verification: {digest: $digest}"
  fi
  [ -z "${4:-}" ] || pline="  options: {postgres: {publication: $4}}"
  mkdir -p "$dir"
  cat >"$dir/$file" <<EOF
# Written by scripts/bench/ch_to_postgres.sh
kind: dpone.batch.v1
source:
  type: clickhouse
  connection: {connection_type: env, connection_id: BENCH_CH}
  table: {schema: dpone_bench, name: ch_$ds}
  options:
    native_transfer:
      execution:
        chunking: {mode: bounded_window, parallelism: $PARALLELISM, checkpointing: resumable}${vline:+$nl$vline}
sink:
  type: postgres
  connection: {connection_type: env, connection_id: BENCH_PG}
  table: {schema: dpone_bench, name: ch_$ds}
  strategy:
    mode: replace
    atomicity: target_atomic
    window: {column: ts, anchor: data_interval_end, lookback: P7D, chunk_interval: P1D, timezone: UTC}${pline:+$nl$pline}
runtime:
  storage: {work_dir: work}
EOF
}

# ---------------------------------------------------------------- measure --

ch_col_names() {
  chq "SELECT arrayStringConcat(arrayMap(x -> x.2, arraySort(groupArray((position, name)))), ', ') FROM system.columns WHERE database = 'dpone_bench' AND table = 'ch_$1' FORMAT TSVRaw"
}

ch_select_sql() {
  echo "SELECT $(ch_col_names "$1") FROM dpone_bench.ch_$1 WHERE ts >= $WIN_START_CH AND ts < $WIN_END_CH FORMAT RowBinary"
}

check_dpone() {
  local ds=$1 rows=$2 status have
  status=$(dpone_status)
  [ "$status" = succeeded ] || die "$ds: dpone run status is $status: $(head -c 2000 "$TMP/last.out")"
  have=$(pgq "SELECT count(*) FROM dpone_bench.ch_$ds")
  [ "$have" = "$rows" ] || die "$ds: dpone_bench.ch_$ds holds $have rows after the run, expected $rows"
}

dpone_run() {
  "$DPONE" run "$TMP/$1/manifest.yaml" --interval-end "$INTERVAL_END" --format json
}

run_dataset() {
  local ds=$1 rows rep file=$TMP/$1.copy sql
  rows=$(rows_of "$ds")
  seed_clickhouse "$ds"
  ensure_postgres "$ds"
  write_manifest "$ds"
  if [ "$SKIP_XXH3" = 0 ]; then
    # The same manifest with the faster row digest (dpone_empty_xxh3).
    write_manifest "$ds" xxh3_128 manifest-xxh3.yaml
    # Refused or not understood: stop now, not after the first measurements.
    "$DPONE" plan "$TMP/$ds/manifest-xxh3.yaml" --interval-end "$INTERVAL_END" >"$TMP/$ds.plan_xxh3" 2>&1 ||
      die "$ds: dpone plan of manifest-xxh3.yaml failed (SKIP_XXH3=1 runs without it): $(head -c 2000 "$TMP/$ds.plan_xxh3")"
    grep -q xxh3_128 "$TMP/$ds.plan_xxh3" ||
      log "$ds: warning: the plan of manifest-xxh3.yaml does not mention xxh3_128"
    { grep -i 'digest' "$TMP/$ds.plan_xxh3" || true; } >"$TMP/$ds.digest_xxh3"
  fi
  if [ "$SKIP_DIRECT" = 0 ]; then
    # The same manifest publishing directly (dpone_direct).
    write_manifest "$ds" - manifest-direct.yaml direct
    "$DPONE" plan "$TMP/$ds/manifest-direct.yaml" --interval-end "$INTERVAL_END" >"$TMP/$ds.plan_direct" 2>&1 ||
      die "$ds: dpone plan of manifest-direct.yaml failed (SKIP_DIRECT=1 runs without it): $(head -c 2000 "$TMP/$ds.plan_direct")"
  fi
  sql=$(ch_select_sql "$ds")

  log "$ds: warm-up (unmeasured): one SELECT and one dpone run into the truncated target"
  curl -sS --fail-with-body "$CH/" --data-binary "$sql" -o /dev/null -w '%{size_download}\n' >"$TMP/$ds.rbbytes"
  pgq "TRUNCATE TABLE dpone_bench.ch_$ds" >/dev/null
  dpone_run "$ds" >"$TMP/last.out" || die "$ds: the warm-up dpone run failed: $(head -c 2000 "$TMP/last.out")"
  check_dpone "$ds" "$rows"
  # The same rows on both sides? (count, sum and range of id, range of ts)
  local ch_sum pg_sum
  ch_sum=$(chq "SELECT count(), sum(id), min(id), max(id), toUnixTimestamp64Micro(min(ts)), toUnixTimestamp64Micro(max(ts)) FROM dpone_bench.ch_$ds FORMAT TSV" | tr '\t' ' ')
  pg_sum=$(pgq "SELECT count(*) || ' ' || sum(id) || ' ' || min(id) || ' ' || max(id) || ' ' || (extract(epoch FROM min(ts)) * 1000000)::bigint || ' ' || (extract(epoch FROM max(ts)) * 1000000)::bigint FROM dpone_bench.ch_$ds")
  [ "$ch_sum" = "$pg_sum" ] || die "$ds: the target differs from the source: ClickHouse '$ch_sum', PostgreSQL '$pg_sum'"
  echo "$pg_sum" >"$TMP/$ds.check"
  echo "dpone_bench.ch_$ds" >"$TMP/$ds.table"
  log "$ds: writing the binary COPY reference file from dpone_bench.ch_$ds"
  psql "$PG_URL" -X -q -c "COPY (SELECT * FROM dpone_bench.ch_$ds WHERE ts >= '$WIN_START_PG' AND ts < '$WIN_END_PG') TO STDOUT (FORMAT binary)" >"$file"
  stat -c %s "$file" >"$TMP/$ds.copybytes"
  pgq "SELECT pg_total_relation_size('dpone_bench.ch_$ds')" >"$TMP/$ds.pgbytes"
  chq "SELECT total_bytes FROM system.tables WHERE database = 'dpone_bench' AND name = 'ch_$ds'" >"$TMP/$ds.chbytes"

  for ((rep = 1; rep <= REPEAT; rep++)); do
    measure "$ds" raw_ch_select "$rep" -- curl -sS --fail-with-body -o /dev/null "$CH/" --data-binary "$sql" ||
      die "$ds: the SELECT failed: $(cat "$TMP/last.err")"

    pgq "TRUNCATE TABLE dpone_bench.ch_${ds}_copy" >/dev/null
    pg_checkpoint
    measure "$ds" raw_pg_copy_in "$rep" -- psql "$PG_URL" -X -q -c '\copy '"dpone_bench.ch_${ds}_copy FROM '$file' (FORMAT binary)" ||
      die "$ds: COPY FROM failed: $(cat "$TMP/last.out" "$TMP/last.err")"
    [ "$(pgq "SELECT count(*) FROM dpone_bench.ch_${ds}_copy")" = "$rows" ] || die "$ds: the COPY did not load $rows rows"
    # Empty again at once: no autovacuum/analyze of it during the next cases.
    pgq "TRUNCATE TABLE dpone_bench.ch_${ds}_copy" >/dev/null

    pgq "TRUNCATE TABLE dpone_bench.ch_$ds" >/dev/null
    pg_checkpoint
    measure "$ds" dpone_empty "$rep" -- "$DPONE" run "$TMP/$ds/manifest.yaml" --interval-end "$INTERVAL_END" --format json ||
      die "$ds: dpone run failed: $(head -c 2000 "$TMP/last.out")"
    check_dpone "$ds" "$rows"

    pg_checkpoint
    measure "$ds" dpone_rerun "$rep" -- "$DPONE" run "$TMP/$ds/manifest.yaml" --interval-end "$INTERVAL_END" --format json ||
      die "$ds: dpone re-run failed: $(head -c 2000 "$TMP/last.out")"
    check_dpone "$ds" "$rows"

    # As dpone_empty, with the xxh3_128 row digest; after dpone_rerun, so
    # that dpone_empty and dpone_rerun run as they did before this case.
    if [ "$SKIP_XXH3" = 0 ]; then
      pgq "TRUNCATE TABLE dpone_bench.ch_$ds" >/dev/null
      pg_checkpoint
      measure "$ds" dpone_empty_xxh3 "$rep" -- "$DPONE" run "$TMP/$ds/manifest-xxh3.yaml" --interval-end "$INTERVAL_END" --format json ||
        die "$ds: dpone run with digest xxh3_128 failed: $(head -c 2000 "$TMP/last.out")"
      check_dpone "$ds" "$rows"
    fi

    # As dpone_empty and dpone_rerun, publishing directly.
    if [ "$SKIP_DIRECT" = 0 ]; then
      pgq "TRUNCATE TABLE dpone_bench.ch_$ds" >/dev/null
      pg_checkpoint
      measure "$ds" dpone_direct "$rep" -- "$DPONE" run "$TMP/$ds/manifest-direct.yaml" --interval-end "$INTERVAL_END" --format json ||
        die "$ds: dpone run with publication direct failed: $(head -c 2000 "$TMP/last.out")"
      check_dpone "$ds" "$rows"
      pg_checkpoint
      measure "$ds" dpone_direct_rerun "$rep" -- "$DPONE" run "$TMP/$ds/manifest-direct.yaml" --interval-end "$INTERVAL_END" --format json ||
        die "$ds: dpone re-run with publication direct failed: $(head -c 2000 "$TMP/last.out")"
      check_dpone "$ds" "$rows"
    fi

    # The re-run left the window's old rows as dead tuples (and
    # dpone_empty_xxh3, if run, a freshly loaded table); unless this was
    # the last repetition, empty the target now, so that no autovacuum of
    # it runs during the next measurements (it is truncated before
    # dpone_empty anyway).
    if [ "$rep" -lt "$REPEAT" ]; then
      pgq "TRUNCATE TABLE dpone_bench.ch_$ds" >/dev/null
    fi
  done
  # Keep the target (as the last case left it, for autovacuum); drop the file.
  rm -f "$file"
}

for ds in $DATASETS; do
  run_dataset "$ds"
done

# ------------------------------------------------------------------ report --

ds_json=()
for ds in $DATASETS; do
  ds_json+=("$(python3 "$UTIL" dataset-json "$TMP" "$ds" "$(rows_of "$ds")" \
    clickhouse_table=table postgres_table=table seed=seed rowbinary_bytes=rbbytes:int copy_binary_bytes=copybytes:int pg_total_relation_bytes=pgbytes:int ch_total_bytes=chbytes:int check_count_sum_min_max_id_min_max_ts=check \
    plan_digest_xxh3=digest_xxh3)")
done
datasets_json=$(IFS=,; echo "[${ds_json[*]}]")
bench_meta \
  "repeat=$REPEAT" "parallelism=$PARALLELISM" "xxh3=$((1 - SKIP_XXH3))" "direct=$((1 - SKIP_DIRECT))" \
  "datasets=$datasets_json" \
  "window={\"column\": \"ts\", \"start\": \"2026-09-02T00:00:00Z\", \"end\": \"2026-09-09T00:00:00Z\", \"chunk_interval\": \"P1D\"}" \
  "postgres_settings=$(pgq "SELECT json_object_agg(name, setting) FROM pg_settings WHERE name IN ('shared_buffers', 'wal_level', 'max_wal_size', 'synchronous_commit', 'fsync', 'maintenance_work_mem', 'work_mem')")" \
  >"$TMP/meta.json"
OUT=$OUT_DIR/ch_to_postgres-$STAMP.json
python3 "$UTIL" report-ch2pg "$TMP/meta.json" "$RESULTS" "$OUT"
log "done in $(($(date +%s) - START_EPOCH)) s; results in $OUT"

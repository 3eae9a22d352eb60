#!/usr/bin/env bash
# Benchmark: dpone moving a 7-day window PostgreSQL -> ClickHouse, next to
# raw references on the same machine, data and window.
#
#   scripts/bench/pg_to_clickhouse.sh
#
# Cases per dataset (each timed with /usr/bin/time: wall seconds, peak RSS of
# the measured client process), REPEAT times, interleaved:
#   raw_pg_copy       psql COPY (SELECT ... window) TO STDOUT (FORMAT binary) > /dev/null
#   raw_ch_insert     curl --data-binary @file INSERT ... FORMAT RowBinary into a
#                     freshly truncated scratch MergeTree table (file dumped once
#                     from the loaded target)
#   ch_postgresql_fn  ClickHouse INSERT ... SELECT FROM postgresql(...) (if the
#                     server supports it; otherwise reported as not available)
#   dpone_empty       dpone run into a truncated target
#   dpone_rerun       dpone run again, replacing the window of a full target
#   dpone_empty_xxh3  dpone_empty with `verification: {digest: xxh3_128}` in the
#                     manifest (manifest-xxh3.yaml), into a truncated target,
#                     measured after dpone_rerun (see SKIP_XXH3)
# and, on dpone_bench.<dataset>_noidx (the same rows, no index on ts; see
# UNINDEXED), the cases dpone's plan reads with one scan per chunk group:
#   raw_pg_copy_noidx       the COPY of raw_pg_copy (a sequential scan)
#   ch_postgresql_fn_noidx  ClickHouse's postgresql() pull of that table
#   dpone_empty_noidx       dpone run into a truncated target
#
# Environment (all optional):
#   PG_URL, CH_URL   servers to use (postgresql://..., http://[user:pw@]host:port);
#                    default: the test services (scripts/services.sh), started
#                    if they are not running and then stopped at the end
#   ROWS_NARROW      rows of dpone_bench.narrow (default 5000000)
#   ROWS_WIDE        rows of dpone_bench.wide (default 1000000)
#   DATASETS         which datasets to run (default "narrow wide")
#   REPEAT           repetitions per case (default 3)
#   PARALLELISM      dpone chunk parallelism (default 2)
#   UNINDEXED        1 (default): also run the unindexed-source cases; 0: skip
#                    them (and the seeding of the <dataset>_noidx tables)
#   SKIP_XXH3=1      do not run dpone_empty_xxh3 (e.g. with a dpone that has no
#                    execution.verification.digest)
#   IDLE_WAIT_MAX    before each measurement, wait up to this many seconds for
#                    the machine to be idle (default 60; 0 = do not wait)
#   IDLE_BUSY_PCT    "idle" means: all CPUs less than this % busy over one
#                    second (default 30)
#   QUIESCE_QUIET_S  before each measurement, wait (up to 60 s) for this many
#                    seconds in a row without a ClickHouse merge in dpone_bench
#                    (default 3)
#   SKIP_BUILD=1     use the existing target/release/dpone
#   DPONE_SOURCE     worktree (default): build the working tree as it is;
#                    head: build a clean export of HEAD under target/bench/
#   OUT_DIR          where the results JSON goes (default target/bench)
#   KEEP_TMP=1       keep the temporary folder (manifests, evidence, RowBinary files)
#   BUMP_SOURCE_XID=0  do not take a PostgreSQL transaction id before each dpone
#                    run (see bump_source_xid below)
#
# Output: target/bench/pg_to_clickhouse-<UTC timestamp>.json and a Markdown
# summary on stdout; progress on stderr. See docs/benchmarks.md.
set -euo pipefail

BENCH_NAME=pg_to_clickhouse
# shellcheck source=scripts/bench/bench_lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/bench_lib.sh"

ROWS_NARROW=${ROWS_NARROW:-5000000}
ROWS_WIDE=${ROWS_WIDE:-1000000}
DATASETS=${DATASETS:-narrow wide}
REPEAT=${REPEAT:-3}
PARALLELISM=${PARALLELISM:-2}
UNINDEXED=${UNINDEXED:-1}
[[ $UNINDEXED == 0 || $UNINDEXED == 1 ]] || die "UNINDEXED must be 0 or 1 (got '$UNINDEXED')"
SKIP_XXH3=${SKIP_XXH3:-0}
[[ $SKIP_XXH3 == 0 || $SKIP_XXH3 == 1 ]] || die "SKIP_XXH3 must be 0 or 1 (got '$SKIP_XXH3')"
SEED_VERSION=1
CHUNK_INTERVAL=P1D

positive_int ROWS_NARROW ROWS_WIDE REPEAT PARALLELISM
for ds in $DATASETS; do
  [[ $ds == narrow || $ds == wide ]] || die "DATASETS may hold only narrow and wide (got '$ds')"
done

bench_init

# host, port, user, password, database of PG_URL (for postgresql()).
mapfile -t PG_PARTS < <(python3 "$UTIL" pg-parts "$PG_URL")
[ "${#PG_PARTS[@]}" -eq 5 ] || die "could not parse PG_URL"
PGH=${PG_PARTS[0]} PGP=${PG_PARTS[1]} PGU=${PG_PARTS[2]} PGPW=${PG_PARTS[3]} PGDB=${PG_PARTS[4]}

bench_build

# ------------------------------------------------------------------- seed --

rows_of() { if [ "$1" = narrow ]; then echo "$ROWS_NARROW"; else echo "$ROWS_WIDE"; fi; }

seed_postgres() {
  seed_pg_table "$1" "$1" "$(rows_of "$1")" >"$TMP/$1.seed"
  if [ "$UNINDEXED" = 1 ]; then
    seed_pg_table "$1_noidx" "$1" "$(rows_of "$1")" off >"$TMP/$1.seed_noidx"
  fi
}

# Column list (name type) of the ClickHouse tables, from the mapping in
# `dpone schema type-matrix`; nullable PostgreSQL columns are Nullable.
ch_columns() {
  if [ "$1" = narrow ]; then
    cat <<'EOF'
id Int64, ts DateTime64(6, 'UTC'), n Int32, amount Decimal(18, 4), s1 String, s2 String
EOF
  else
    cat <<'EOF'
id Int64, ts DateTime64(6, 'UTC'), i1 Int32, i2 Nullable(Int32), i3 Int32,
si1 Int16, si2 Nullable(Int16), b1 Int64, b2 Nullable(Int64), b3 Int64,
f1 Float64, f2 Nullable(Float64), r1 Float32,
d1 Decimal(18, 4), d2 Nullable(Decimal(18, 4)), d3 Decimal(38, 10),
t1 String, t2 String, t3 String, t4 Nullable(String), t5 String,
u1 UUID, u2 Nullable(UUID), dt1 Date32, dt2 Nullable(Date),
flag1 Bool, flag2 Nullable(Bool),
ts2 DateTime64(6), ts3 Nullable(DateTime64(6)), ts4 Nullable(DateTime64(6, 'UTC'))
EOF
  fi
}

# The target (dpone_bench.<ds>) and two scratch tables of the same structure:
# <ds>_raw (RowBinary INSERT reference) and <ds>_pgfn (postgresql() pull).
ensure_clickhouse() {
  local t
  for t in "$1" "$1_raw" "$1_pgfn"; do
    ensure_ch_table "$t" id "$(ch_columns "$1")"
  done
  drop_ch_leftovers
}


# ---------------------------------------------------------------- measure --

count_ch() { chq "SELECT count() FROM dpone_bench.$1"; }

expect_rows() {
  local table=$1 rows=$2 have
  have=$(count_ch "$table")
  [ "$have" = "$rows" ] || die "dpone_bench.$table holds $have rows after the run, expected $rows"
}

pg_copy_sql() {
  echo "COPY (SELECT * FROM dpone_bench.$1 WHERE ts >= '$WIN_START_PG' AND ts < '$WIN_END_PG') TO STDOUT (FORMAT binary)"
}

# A ClickHouse string literal.
ch_str() {
  local s=${1//\\/\\\\}
  s=${s//\'/\\\'}
  printf "'%s'" "$s"
}

# postgresql(...) table function reading dpone_bench.<ds> from PG_URL's server.
pgfn_source() {
  echo "postgresql($(ch_str "$PGH:$PGP"), $(ch_str "$PGDB"), $(ch_str "$1"), $(ch_str "$PGU"), $(ch_str "$PGPW"), 'dpone_bench')"
}

# pgfn_sql DATASET [SOURCE_TABLE]: the postgresql() pull of SOURCE_TABLE
# (default DATASET) into dpone_bench.DATASET_pgfn.
pgfn_sql() {
  echo "INSERT INTO dpone_bench.$1_pgfn SELECT * FROM $(pgfn_source "${2:-$1}") WHERE ts >= $WIN_START_CH AND ts < $WIN_END_CH"
}

dpone_run() {
  bump_source_xid
  "$DPONE" run "$TMP/$1/manifest.yaml" --interval-end "$INTERVAL_END" --format json
}

check_dpone() {
  local ds=$1 rows=$2 status
  status=$(dpone_status)
  [ "$status" = succeeded ] || die "$ds: dpone run status is $status: $(head -c 2000 "$TMP/last.out")"
  expect_rows "$ds" "$rows"
}

# The unindexed-source cases of one repetition: dpone_bench.<ds>_noidx holds
# the rows of dpone_bench.<ds> without an index on ts.
run_unindexed() {
  local ds=$1 rows=$2 rep=$3 pgfn=$4 src=$1_noidx
  measure "$ds" raw_pg_copy_noidx "$rep" -- psql "$PG_URL" -X -q -o /dev/null -c "$(pg_copy_sql "$src")" ||
    die "$ds: COPY of $src failed: $(cat "$TMP/last.err")"

  if [ "$pgfn" = 1 ]; then
    chq "TRUNCATE TABLE dpone_bench.${ds}_pgfn" >/dev/null
    if measure "$ds" ch_postgresql_fn_noidx "$rep" -- curl -sS --fail-with-body "$CH/" --data-binary "$(pgfn_sql "$ds" "$src")"; then
      expect_rows "${ds}_pgfn" "$rows"
    else
      log "$ds: postgresql() INSERT from $src failed: $(head -c 300 "$TMP/last.out")"
    fi
  fi

  chq "TRUNCATE TABLE dpone_bench.$ds" >/dev/null
  bump_source_xid
  measure "$ds" dpone_empty_noidx "$rep" -- "$DPONE" run "$TMP/$src/manifest.yaml" --interval-end "$INTERVAL_END" --format json ||
    die "$ds: dpone run from $src failed: $(head -c 2000 "$TMP/last.out")"
  check_dpone "$ds" "$rows"
  # Leave the target as the indexed cases expect it (dpone_rerun replaces a full window).
}

run_dataset() {
  local ds=$1 rows rep same pgfn=1 rb=$TMP/$1.rowbinary
  rows=$(rows_of "$ds")
  seed_postgres "$ds"
  ensure_clickhouse "$ds"
  write_pg_ch_manifest "$ds" "$ds"
  # The unindexed source, into the same target table.
  [ "$UNINDEXED" = 0 ] || write_pg_ch_manifest "${ds}_noidx" "${ds}_noidx" "" "$ds"
  if [ "$SKIP_XXH3" = 0 ]; then
    # The same manifest with the faster row digest (dpone_empty_xxh3).
    write_pg_ch_manifest "$ds" "$ds" "" "$ds" xxh3_128 manifest-xxh3.yaml
    # Refused or not understood: stop now, not after the first measurements.
    "$DPONE" plan "$TMP/$ds/manifest-xxh3.yaml" --interval-end "$INTERVAL_END" >"$TMP/$ds.plan_xxh3" 2>&1 ||
      die "$ds: dpone plan of manifest-xxh3.yaml failed (SKIP_XXH3=1 runs without it): $(head -c 2000 "$TMP/$ds.plan_xxh3")"
    grep -q xxh3_128 "$TMP/$ds.plan_xxh3" ||
      log "$ds: warning: the plan of manifest-xxh3.yaml does not mention xxh3_128"
    { grep -i 'digest' "$TMP/$ds.plan_xxh3" || true; } >"$TMP/$ds.digest_xxh3"
  fi
  pgq "SELECT pg_total_relation_size('dpone_bench.$ds')" >"$TMP/$ds.pgbytes"

  if [ "$UNINDEXED" = 1 ]; then
    # The plan must say how the unindexed table is read (and the indexed one).
    "$DPONE" plan "$TMP/${ds}_noidx/manifest.yaml" --interval-end "$INTERVAL_END" >"$TMP/$ds.plan_noidx" ||
      die "$ds: dpone plan of ${ds}_noidx failed: $(head -c 2000 "$TMP/$ds.plan_noidx")"
    grep -q 'one scan per chunk group\|per-chunk range reads' "$TMP/$ds.plan_noidx" ||
      die "$ds: the plan of ${ds}_noidx does not say how the window is read"
    grep '^access' "$TMP/$ds.plan_noidx" >"$TMP/$ds.access_noidx" || true
    "$DPONE" plan "$TMP/$ds/manifest.yaml" --interval-end "$INTERVAL_END" | { grep '^access' || true; } >"$TMP/$ds.access"
  fi
  log "$ds: warm-up (unmeasured): one COPY and one dpone run"
  psql "$PG_URL" -X -q -c "$(pg_copy_sql "$ds")" >/dev/null
  dpone_run "$ds" >"$TMP/last.out" || die "$ds: the warm-up dpone run failed: $(head -c 2000 "$TMP/last.out")"
  check_dpone "$ds" "$rows"
  log "$ds: writing the RowBinary reference file from dpone_bench.$ds"
  curl -sS --fail-with-body "$CH/" -o "$rb" \
    --data-binary "SELECT * FROM dpone_bench.$ds WHERE ts >= $WIN_START_CH AND ts < $WIN_END_CH FORMAT RowBinary"
  stat -c %s "$rb" >"$TMP/$ds.rbbytes"

  # Does this server have a working postgresql() table function?
  if ! chq "SELECT * FROM $(pgfn_source "$ds") LIMIT 1 FORMAT Null" \
    >"$TMP/pgfn.err" 2>&1; then
    pgfn=0
    log "$ds: postgresql() table function not available: $(head -c 300 "$TMP/pgfn.err")"
    python3 -c 'import json,sys; print(json.dumps({"dataset": sys.argv[1], "case": "ch_postgresql_fn", "rep": 0, "ok": False, "error": open(sys.argv[2]).read()[:2000]}))' \
      "$ds" "$TMP/pgfn.err" >>"$RESULTS"
  fi

  for ((rep = 1; rep <= REPEAT; rep++)); do
    measure "$ds" raw_pg_copy "$rep" -- psql "$PG_URL" -X -q -o /dev/null -c "$(pg_copy_sql "$ds")" ||
      die "$ds: COPY failed: $(cat "$TMP/last.err")"

    chq "TRUNCATE TABLE dpone_bench.${ds}_raw" >/dev/null
    measure "$ds" raw_ch_insert "$rep" -- curl -sS --fail-with-body --data-binary "@$rb" \
      "$CH/?query=INSERT+INTO+dpone_bench.${ds}_raw+FORMAT+RowBinary" ||
      die "$ds: RowBinary INSERT failed: $(cat "$TMP/last.out" "$TMP/last.err")"
    expect_rows "${ds}_raw" "$rows"

    if [ "$pgfn" = 1 ]; then
      chq "TRUNCATE TABLE dpone_bench.${ds}_pgfn" >/dev/null
      if measure "$ds" ch_postgresql_fn "$rep" -- curl -sS --fail-with-body "$CH/" --data-binary "$(pgfn_sql "$ds")"; then
        expect_rows "${ds}_pgfn" "$rows"
        # Same rows and values as dpone's target? (a content hash, unordered)
        if [ "$rep" = 1 ]; then
          same=$(chq "SELECT (SELECT groupBitXor(cityHash64(*)) FROM dpone_bench.${ds}_pgfn) = (SELECT groupBitXor(cityHash64(*)) FROM dpone_bench.$ds)")
          echo "$same" >"$TMP/$ds.pgfn_same"
          [ "$same" = 1 ] || log "$ds: warning: the rows postgresql() inserted differ from dpone's target"
        fi
      else
        log "$ds: postgresql() INSERT failed; reported as not available: $(head -c 300 "$TMP/last.out")"
        pgfn=0
      fi
    fi

    chq "TRUNCATE TABLE dpone_bench.$ds" >/dev/null
    bump_source_xid
    measure "$ds" dpone_empty "$rep" -- "$DPONE" run "$TMP/$ds/manifest.yaml" --interval-end "$INTERVAL_END" --format json ||
      die "$ds: dpone run failed: $(head -c 2000 "$TMP/last.out")"
    check_dpone "$ds" "$rows"

    bump_source_xid
    measure "$ds" dpone_rerun "$rep" -- "$DPONE" run "$TMP/$ds/manifest.yaml" --interval-end "$INTERVAL_END" --format json ||
      die "$ds: dpone re-run failed: $(head -c 2000 "$TMP/last.out")"
    check_dpone "$ds" "$rows"

    # As dpone_empty, with the xxh3_128 row digest; after dpone_rerun, so
    # that dpone_empty and dpone_rerun run as they did before this case.
    if [ "$SKIP_XXH3" = 0 ]; then
      chq "TRUNCATE TABLE dpone_bench.$ds" >/dev/null
      bump_source_xid
      measure "$ds" dpone_empty_xxh3 "$rep" -- "$DPONE" run "$TMP/$ds/manifest-xxh3.yaml" --interval-end "$INTERVAL_END" --format json ||
        die "$ds: dpone run with digest xxh3_128 failed: $(head -c 2000 "$TMP/last.out")"
      check_dpone "$ds" "$rows"
    fi

    if [ "$UNINDEXED" = 1 ]; then
      run_unindexed "$ds" "$rows" "$rep" "$pgfn"
    fi
  done

  # Free the scratch tables and dpone's backup generation; keep the target.
  chq "TRUNCATE TABLE dpone_bench.${ds}_raw" >/dev/null
  chq "TRUNCATE TABLE dpone_bench.${ds}_pgfn" >/dev/null
  drop_ch_backups
  rm -f "$rb"
}

# ------------------------------------------------------------------- main --

for ds in $DATASETS; do
  run_dataset "$ds"
done

# ------------------------------------------------------------------ report --

ds_json=()
for ds in $DATASETS; do
  ds_json+=("$(python3 "$UTIL" dataset-json "$TMP" "$ds" "$(rows_of "$ds")" \
    seed=seed pg_total_relation_bytes=pgbytes:int rowbinary_bytes=rbbytes:int postgresql_fn_rows_equal_dpone_target=pgfn_same:bool \
    seed_noidx=seed_noidx access=access access_noidx=access_noidx plan_digest_xxh3=digest_xxh3)")
done
datasets_json=$(IFS=,; echo "[${ds_json[*]}]")
bench_meta \
  "repeat=$REPEAT" "parallelism=$PARALLELISM" "unindexed=$UNINDEXED" "xxh3=$((1 - SKIP_XXH3))" \
  "datasets=$datasets_json" \
  "window={\"column\": \"ts\", \"start\": \"2026-09-02T00:00:00Z\", \"end\": \"2026-09-09T00:00:00Z\", \"chunk_interval\": \"P1D\"}" \
  >"$TMP/meta.json"
OUT=$OUT_DIR/pg_to_clickhouse-$STAMP.json
python3 "$UTIL" report "$TMP/meta.json" "$RESULTS" "$OUT"
log "done in $(($(date +%s) - START_EPOCH)) s; results in $OUT"

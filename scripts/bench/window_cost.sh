#!/usr/bin/env bash
# Benchmark: does a window replace into ClickHouse cost the window, not the
# target's history? The same 5M-row P7D window from PostgreSQL
# (dpone_bench.narrow, as pg_to_clickhouse.sh seeds it) is replaced in
# targets that hold 0, 20M and 40M rows of older history outside the window,
# for three target layouts:
#
#   daily        PARTITION BY toYYYYMMDD(ts)
#   monthly      PARTITION BY toYYYYMM(ts)   (the window's month straddles)
#   unpartitioned                            (every kept row is copied)
#
#   scripts/bench/window_cost.sh
#
# Each point is a `dpone run` timed with /usr/bin/time (wall seconds, peak
# RSS), REPEAT times. History is generated in ClickHouse itself (synthetic
# rows before the window, spread over two years) and kept exactly: each run
# is checked to leave every history row in place.
#
# Environment (all optional; see pg_to_clickhouse.sh for the shared ones):
#   ROWS_NARROW    rows of the window (default 5000000)
#   HISTORY        history sizes (default "0 20000000 40000000")
#   LAYOUTS        default "daily monthly unpartitioned"
#   REPEAT         runs per point (default 3); REPEAT_UNPARTITIONED (default 1)
#   PARALLELISM    dpone chunk parallelism (default 2)
#   PG_URL, CH_URL, SKIP_BUILD, DPONE_SOURCE, OUT_DIR, KEEP_TMP, IDLE_WAIT_MAX, IDLE_BUSY_PCT, QUIESCE_QUIET_S
#
# Output: target/bench/window_cost-<UTC timestamp>.json and a Markdown
# summary on stdout. Goals (docs/benchmarks.md): with daily partitions the
# 40M-history run takes at most 1.2x the empty-target run; with monthly
# partitions at most 1.5x; the unpartitioned case is reported for comparison.
set -euo pipefail

BENCH_NAME=window_cost
# shellcheck source=scripts/bench/bench_lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/bench_lib.sh"

ROWS_NARROW=${ROWS_NARROW:-5000000}
HISTORY=${HISTORY:-0 20000000 40000000}
LAYOUTS=${LAYOUTS:-daily monthly unpartitioned}
REPEAT=${REPEAT:-3}
REPEAT_UNPARTITIONED=${REPEAT_UNPARTITIONED:-1}
PARALLELISM=${PARALLELISM:-2}
SEED_VERSION=1
positive_int ROWS_NARROW REPEAT REPEAT_UNPARTITIONED PARALLELISM

bench_init
bench_build

COLS="id Int64, ts DateTime64(6, 'UTC'), n Int32, amount Decimal(18, 4), s1 String, s2 String"
# History lies before the window [2026-09-02, 2026-09-09): two years of it.
HIST_START="toDateTime64('2024-09-02 00:00:00', 6, 'UTC')"
HIST_SPAN_US=$((730 * 86400 * 1000000))

partition_of() {
  case $1 in
    daily) echo "PARTITION BY toYYYYMMDD(ts)" ;;
    monthly) echo "PARTITION BY toYYYYMM(ts)" ;;
    unpartitioned) echo "" ;;
    *) die "unknown layout $1" ;;
  esac
}

# Appends history rows [from, to) of the deterministic sequence: ids far
# above the source's, timestamps spread evenly over the two years.
add_history() {
  local t=$1 from=$2 to=$3 total=$4 step
  [ "$to" -gt "$from" ] || return 0
  step=$((HIST_SPAN_US / total))
  log "$t: adding history rows $from..$to"
  # Daily partitions over two years: one INSERT block spans ~730 partitions.
  chq "INSERT INTO dpone_bench.$t SELECT toInt64(1000000000 + number), $HIST_START + toIntervalMicrosecond(number * $step), \
toInt32(number % 100000), toDecimal64(number % 1000000, 4), concat('history-', toString(number % 9973)), repeat('h', toUInt32(number % 17)) \
FROM numbers($from, $((to - from))) SETTINGS max_insert_threads = 2, max_partitions_per_insert_block = 0" >/dev/null
}

history_count() {
  chq "SELECT count() FROM dpone_bench.$1 WHERE ts < toDateTime64('2026-09-02 00:00:00', 6, 'UTC')"
}

history_fingerprint() {
  chq "SELECT count(), groupBitXor(cityHash64(*)) FROM dpone_bench.$1 WHERE ts < toDateTime64('2026-09-02 00:00:00', 6, 'UTC')"
}

log "seeding the PostgreSQL window"
seed_pg_table narrow narrow "$ROWS_NARROW" >"$TMP/narrow.seed"

max_history=0
for h in $HISTORY; do [ "$h" -gt "$max_history" ] && max_history=$h; done

for layout in $LAYOUTS; do
  t=wc_$layout
  reps=$REPEAT
  [ "$layout" = unpartitioned ] && reps=$REPEAT_UNPARTITIONED
  chq "DROP TABLE IF EXISTS dpone_bench.$t SYNC" >/dev/null
  drop_ch_leftovers
  chq "CREATE TABLE dpone_bench.$t ($COLS) ENGINE = MergeTree $(partition_of "$layout") ORDER BY (ts, id)" >/dev/null
  write_pg_ch_manifest "$t" narrow "" "$t"
  have=0
  for h in $HISTORY; do
    add_history "$t" "$have" "$h" "$max_history"
    have=$h
    chq "OPTIMIZE TABLE dpone_bench.$t FINAL" >/dev/null || true
    before=$(history_fingerprint "$t")
    for ((rep = 1; rep <= reps; rep++)); do
      drop_ch_backups
      bump_source_xid
      measure "$layout" "history_$h" "$rep" -- "$DPONE" run "$TMP/$t/manifest.yaml" --interval-end "$INTERVAL_END" --format json ||
        die "$layout/$h: dpone run failed: $(head -c 2000 "$TMP/last.out")"
      [ "$(dpone_status)" = succeeded ] || die "$layout/$h: status $(dpone_status)"
      after=$(history_fingerprint "$t")
      [ "$after" = "$before" ] || die "$layout/$h: the history changed ($before -> $after)"
      [ "$(chq "SELECT count() FROM dpone_bench.$t WHERE ts >= toDateTime64('2026-09-02 00:00:00', 6, 'UTC')")" = "$ROWS_NARROW" ] ||
        die "$layout/$h: the window does not hold $ROWS_NARROW rows"
    done
  done
  drop_ch_backups
  chq "DROP TABLE IF EXISTS dpone_bench.$t SYNC" >/dev/null
done

bench_meta \
  "repeat=$REPEAT" "repeat_unpartitioned=$REPEAT_UNPARTITIONED" "parallelism=$PARALLELISM" \
  "window_rows=$ROWS_NARROW" "history=[${HISTORY// /, }]" "layouts=\"$LAYOUTS\"" \
  "window={\"column\": \"ts\", \"start\": \"2026-09-02T00:00:00Z\", \"end\": \"2026-09-09T00:00:00Z\", \"chunk_interval\": \"P1D\"}" \
  >"$TMP/meta.json"
OUT=$OUT_DIR/window_cost-$STAMP.json
python3 "$UTIL" report-window-cost "$TMP/meta.json" "$RESULTS" "$OUT"
log "done in $(($(date +%s) - START_EPOCH)) s; results in $OUT"

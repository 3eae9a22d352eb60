#!/usr/bin/env bash
# Benchmark "Bounded resources": peak memory of a dpone PostgreSQL ->
# ClickHouse (or, with ROUTE=ch_to_postgres, ClickHouse -> PostgreSQL) window
# run with the default stage limits, at growing sizes, and the refusal (and,
# with raised limits, the transfer) of a row holding a ~10 MiB text value.
#
#   scripts/bench/memory.sh                          # PostgreSQL -> ClickHouse
#   ROUTE=ch_to_postgres scripts/bench/memory.sh     # ClickHouse -> PostgreSQL, part 1 only
#
# Part 1, sizes (ROUTE=pg_to_clickhouse, the default): PostgreSQL tables
# dpone_bench.narrow_<n> (the narrow shape of
# scripts/bench/seed_postgres.sql, ts over exactly [2026-09-02, 2026-09-09))
# for each size in SIZES, each moved into a truncated ClickHouse MergeTree
# table of the same name by `dpone run` (replace, window P7D / P1D,
# parallelism 2) with only `native_chunks: {stage_allocated_bytes_stop_threshold}`
# (every other stage limit at its default). Measured per run: wall seconds and
# peak RSS (/usr/bin/time %M) and, from the evidence, memory.payload_budget_bytes,
# payload_budget_peak_reserved_bytes, process_peak_rss_bytes, budget_waits,
# and the largest RssAnon / RssFile that bench_util.py rss-sample polls.
# Sizes interleaved, REPEAT times, after one unmeasured run each. Target: peak RSS flat within RSS_FLAT_PCT % across sizes and at most
# RSS_MAX_MIB MiB; the report also compares it with issue 14's target, flat
# within RSS_FLAT_PCT % and at most 20 MiB, on either route.
#
# Part 1 with ROUTE=ch_to_postgres: ClickHouse MergeTree tables
# dpone_bench.ch_narrow_<n> (ch_narrow_1m, ch_narrow_5m, ch_narrow_20m),
# seeded from numbers(n) exactly as ch_to_postgres.sh seeds ch_narrow
# (seed_ch_table in bench_lib.sh: same columns and values, ts over exactly
# [2026-09-02, 2026-09-09), reused while the row count and seed version in the
# table comment match), each moved into the PostgreSQL table of the same name
# in schema dpone_bench (NOT NULL columns, index on ts, as ch_to_postgres.sh
# creates ch_narrow), truncated and CHECKPOINTed before every run, by the same
# manifest with source clickhouse and sink postgres. Measured as above.
#
# Part 2, big value (ROUTE=pg_to_clickhouse only; skipped with
# ROUTE=ch_to_postgres): dpone_bench.bigvalue (BIG_ROWS rows, one of them
# with a 10 MiB payload) into a ClickHouse target pre-filled with other rows.
#   A  default limits: must exit 1 with error_code row_too_large naming the
#      column and max_row_bytes = 1048576, the target unchanged (count,
#      content hash, table UUID) and no _dpone_ table left behind;
#   B  max_row_bytes 16 MiB, max_bytes 32 MiB: must move every row, the big
#      value intact (length and md5 equal on both sides).
#
# Environment (all optional; see also docs/benchmarks.md):
#   ROUTE            pg_to_clickhouse (default) or ch_to_postgres
#   SIZES            rows per size (default "1000000 5000000 20000000")
#   REPEAT           runs per size and per big-value case (default 3)
#   PARALLELISM      chunking.parallelism (default 2)
#   CHUNK_INTERVAL   the window's chunk_interval (default P1D: 7 chunks)
#   BIG_ROWS         rows of dpone_bench.bigvalue (default 100000)
#   BIGVALUE=0       skip part 2 (always skipped with ROUTE=ch_to_postgres)
#   RSS_MAX_MIB, RSS_FLAT_PCT   the target (default 64, 10)
#   PG_URL, CH_URL, IDLE_WAIT_MAX, IDLE_BUSY_PCT, QUIESCE_QUIET_S, DPONE_SOURCE, SKIP_BUILD,
#   OUT_DIR, KEEP_TMP, BUMP_SOURCE_XID: as in pg_to_clickhouse.sh
#   (BUMP_SOURCE_XID only matters with a PostgreSQL source)
#
# Output: target/bench/memory-<UTC timestamp>.json (ROUTE=ch_to_postgres:
# memory-ch_to_postgres-<UTC timestamp>.json) and a Markdown summary on
# stdout; progress on stderr.
set -euo pipefail

BENCH_NAME=memory
# shellcheck source=scripts/bench/bench_lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/bench_lib.sh"

ROUTE=${ROUTE:-pg_to_clickhouse}
SIZES=${SIZES:-1000000 5000000 20000000}
REPEAT=${REPEAT:-3}
PARALLELISM=${PARALLELISM:-2}
BIG_ROWS=${BIG_ROWS:-100000}
CHUNK_INTERVAL=${CHUNK_INTERVAL:-P1D}
BIGVALUE=${BIGVALUE:-1}
RSS_MAX_MIB=${RSS_MAX_MIB:-64}
RSS_FLAT_PCT=${RSS_FLAT_PCT:-10}
# Issue 14's own bound on peak RSS, on both routes (reported next to RSS_MAX_MIB).
ISSUE_RSS_MIB=20
STOP_THRESHOLD=107374182400
SEED_VERSION=1
DEFAULT_NC="{stage_allocated_bytes_stop_threshold: $STOP_THRESHOLD}"
RAISED_NC="{max_row_bytes: 16777216, max_bytes: 33554432, stage_allocated_bytes_stop_threshold: $STOP_THRESHOLD}"
# The big value: 327680 md5 hex strings = 10 MiB (see seed_postgres.sql).
BIG_LEN=10485760

[[ $ROUTE == pg_to_clickhouse || $ROUTE == ch_to_postgres ]] ||
  die "ROUTE must be pg_to_clickhouse or ch_to_postgres (got '$ROUTE')"
positive_int REPEAT PARALLELISM BIG_ROWS RSS_MAX_MIB RSS_FLAT_PCT
for n in $SIZES; do
  [[ $n =~ ^[1-9][0-9]*$ ]] || die "SIZES must hold positive integers (got '$n')"
done
[ "$BIG_ROWS" -ge 10 ] || die "BIG_ROWS must be at least 10"
[[ $CHUNK_INTERVAL =~ ^P(T[0-9]+[HMS]|[0-9]+D)$ ]] || die "CHUNK_INTERVAL must look like P1D or PT6H (got '$CHUNK_INTERVAL')"

bench_init
bench_build
drop_ch_leftovers

# narrow_1m, narrow_5m, narrow_20m; narrow_200k; narrow_12345 (with
# ROUTE=ch_to_postgres: ch_narrow_1m, ...).
table_of() {
  local n=$1 p=narrow_
  if [ "$ROUTE" = ch_to_postgres ]; then
    p=ch_narrow_
  fi
  if [ $((n % 1000000)) -eq 0 ]; then
    echo "$p$((n / 1000000))m"
  elif [ $((n % 1000)) -eq 0 ]; then
    echo "$p$((n / 1000))k"
  else
    echo "$p$n"
  fi
}

NARROW_CH="id Int64, ts DateTime64(6, 'UTC'), n Int32, amount Decimal(18, 4), s1 String, s2 String"
BIG_CH="id Int64, ts DateTime64(6, 'UTC'), n Int32, label String, payload String"


# measure_sampled GROUP CASE REP -- command: measure, while bench_util.py
# rss-sample polls the dpone process's RssAnon / RssFile; the maxima are
# added to the measurement's line ("rss_sampled").
measure_sampled() {
  local stop=$TMP/rss.stop out=$TMP/rss.json rc=0 spid
  rm -f "$stop" "$out"
  python3 "$UTIL" rss-sample "$DPONE" "$stop" "$out" &
  spid=$!
  measure "$@" || rc=$?
  touch "$stop"
  wait "$spid" || log "warning: the RSS sampler failed"
  if [ -s "$out" ]; then
    python3 - "$RESULTS" "$out" <<'EOF'
import json, sys
results, sampled = sys.argv[1], sys.argv[2]
with open(results) as f:
    lines = [l for l in f if l.strip()]
last = json.loads(lines[-1])
with open(sampled) as f:
    last["rss_sampled"] = json.load(f)
lines[-1] = json.dumps(last) + "\n"
with open(results, "w") as f:
    f.writelines(lines)
EOF
  fi
  return "$rc"
}

run_dpone() {
  if [ "$ROUTE" = pg_to_clickhouse ]; then
    bump_source_xid
  fi
  "$DPONE" run "$TMP/$1/manifest.yaml" --interval-end "$INTERVAL_END" --format json
}

# The size table's target, emptied before a run: ClickHouse, or (ROUTE=
# ch_to_postgres) PostgreSQL, followed by a CHECKPOINT so that the run does
# not share the disk with the previous run's dirty pages.
empty_target() {
  if [ "$ROUTE" = pg_to_clickhouse ]; then
    chq "TRUNCATE TABLE dpone_bench.$1" >/dev/null
  else
    pgq "TRUNCATE TABLE dpone_bench.$1" >/dev/null
    pg_checkpoint
  fi
}

target_count() {
  if [ "$ROUTE" = pg_to_clickhouse ]; then
    chq "SELECT count() FROM dpone_bench.$1"
  else
    pgq "SELECT count(*) FROM dpone_bench.$1"
  fi
}

# ------------------------------------------------------------ part 1: sizes --

log "route: $ROUTE"
SIZE_JSON=()
for n in $SIZES; do
  t=$(table_of "$n")
  if [ "$ROUTE" = pg_to_clickhouse ]; then
    seed=$(seed_pg_table "$t" narrow "$n")
    ensure_ch_table "$t" id "$NARROW_CH"
    write_pg_ch_manifest "$t" "$t" "$DEFAULT_NC"
    SIZE_JSON+=("{\"table\": \"$t\", \"rows\": $n, \"seed\": \"$seed\", \"pg_total_relation_bytes\": $(pgq "SELECT pg_total_relation_size('dpone_bench.$t')")}")
  else
    seed=$(seed_ch_table "$t" narrow "$n")
    ensure_pg_table "$t" narrow
    write_ch_pg_manifest "$t" "$t" "$DEFAULT_NC"
    SIZE_JSON+=("{\"table\": \"$t\", \"rows\": $n, \"seed\": \"$seed\", \"ch_total_bytes\": $(chq "SELECT total_bytes FROM system.tables WHERE database = 'dpone_bench' AND name = '$t'")}")
  fi
  # Warm-up (unmeasured): the table into the page cache, the run checked.
  log "$t: warm-up run (unmeasured)"
  empty_target "$t"
  run_dpone "$t" >"$TMP/last.out" || die "$t: the warm-up run failed: $(head -c 2000 "$TMP/last.out")"
  [ "$(dpone_status)" = succeeded ] || die "$t: warm-up status $(dpone_status)"
  [ "$(target_count "$t")" = "$n" ] || die "$t: the warm-up run did not load $n rows"
  if [ "$ROUTE" = pg_to_clickhouse ]; then
    drop_ch_backups
  fi
done

for ((rep = 1; rep <= REPEAT; rep++)); do
  for n in $SIZES; do
    t=$(table_of "$n")
    empty_target "$t"
    if [ "$ROUTE" = pg_to_clickhouse ]; then
      bump_source_xid
    fi
    measure_sampled "$t" dpone_empty "$rep" -- "$DPONE" run "$TMP/$t/manifest.yaml" --interval-end "$INTERVAL_END" --format json ||
      die "$t: dpone run failed: $(head -c 2000 "$TMP/last.out")"
    [ "$(dpone_status)" = succeeded ] || die "$t: status $(dpone_status)"
    have=$(target_count "$t")
    [ "$have" = "$n" ] || die "dpone_bench.$t holds $have rows after the run, expected $n"
    if [ "$ROUTE" = pg_to_clickhouse ]; then
      drop_ch_backups
    fi
  done
done
# The targets stay loaded (reused by nothing; truncate to free the space).
for n in $SIZES; do
  if [ "$ROUTE" = pg_to_clickhouse ]; then
    chq "TRUNCATE TABLE dpone_bench.$(table_of "$n")" >/dev/null
  else
    pgq "TRUNCATE TABLE dpone_bench.$(table_of "$n")" >/dev/null
  fi
done

# -------------------------------------------------------- part 2: big value --

CHECKS=$TMP/checks.jsonl
: >"$CHECKS"
# check OK|FAILED "what" ["detail"]
check() {
  local ok=$1 what=$2 detail=${3:-}
  python3 -c 'import json,sys; print(json.dumps({"ok": sys.argv[1] == "ok", "check": sys.argv[2], "detail": sys.argv[3]}))' \
    "$ok" "$what" "$detail" >>"$CHECKS"
  log "bigvalue: $ok: $what${detail:+ ($detail)}"
}
same() { if [ "$1" = "$2" ]; then echo ok; else echo FAILED; fi; }

BIG=bigvalue
BIG_ID=$((BIG_ROWS / 2 + 1))
big_seed=skipped
if [ "$ROUTE" = ch_to_postgres ]; then
  log "part 2 (big value) is PostgreSQL -> ClickHouse only: skipped with ROUTE=ch_to_postgres"
elif [ "$BIGVALUE" = 1 ]; then
  big_seed=$(seed_pg_table "$BIG" bigvalue "$BIG_ROWS")
  ensure_ch_table "$BIG" id "$BIG_CH"
  write_pg_ch_manifest big_default "$BIG" "$DEFAULT_NC"
  write_pg_ch_manifest big_raised "$BIG" "$RAISED_NC"

  pg_big=$(pgq "SELECT length(payload) || ' ' || md5(payload) FROM dpone_bench.$BIG WHERE id = $BIG_ID")
  [ "${pg_big%% *}" = "$BIG_LEN" ] || die "dpone_bench.$BIG row $BIG_ID has no $BIG_LEN-character payload: $pg_big"
  # Every payload, in id order, hashed on both sides.
  pg_all=$(pgq "SELECT count(*) || ' ' || md5(string_agg(payload, '|' ORDER BY id)) FROM dpone_bench.$BIG WHERE ts >= '$WIN_START_PG' AND ts < '$WIN_END_PG'")

  # The target before each case: rows inside the window (to be replaced) and
  # rows before it (to be kept), none of them from the source.
  reset_big_target() {
    chq "TRUNCATE TABLE dpone_bench.$BIG" >/dev/null
    chq "INSERT INTO dpone_bench.$BIG SELECT number + 1, addSeconds($WIN_START_CH, number * 600), toInt32(number), 'old', repeat('o', number % 50) FROM numbers(1000)" >/dev/null
    chq "INSERT INTO dpone_bench.$BIG SELECT 1000000000 + number, addSeconds($WIN_START_CH, -1 - number * 60), toInt32(number), 'kept', 'before the window' FROM numbers(100)" >/dev/null
  }
  # count, content hash and UUID of the target; the _dpone_ tables of dpone_bench.
  big_state() {
    chq "SELECT count(), groupBitXor(cityHash64(*)) FROM dpone_bench.$BIG FORMAT TSV" | tr '\t' ' '
    chq "SELECT toString(uuid) FROM system.tables WHERE database = 'dpone_bench' AND name = '$BIG'"
  }
  owned_tables() {
    chq "SELECT arrayStringConcat(arraySort(groupArray(name)), ',') FROM system.tables WHERE database = 'dpone_bench' AND startsWith(name, '_dpone_')"
  }

  drop_ch_backups
  for ((rep = 1; rep <= REPEAT; rep++)); do
    # A: default limits, must be refused.
    reset_big_target
    before=$(big_state)
    owned_before=$(owned_tables)
    rc=0
    bump_source_xid
    measure_sampled "$BIG" dpone_bigvalue_default "$rep" -- "$DPONE" run "$TMP/big_default/manifest.yaml" --interval-end "$INTERVAL_END" --format json || rc=$?
    read -r code msg < <(python3 "$UTIL" run-error "$TMP/last.out")
    check "$(same "$rc" 1)" "A #$rep: default limits: exit code 1" "exit $rc"
    check "$(same "$code" row_too_large)" "A #$rep: error_code row_too_large" "$code"
    if [[ $msg == *"\`payload\`"* && $msg == *1048576* ]]; then
      check ok "A #$rep: the message names the column and the 1 MiB limit" "$msg"
    else
      check FAILED "A #$rep: the message names the column and the 1 MiB limit" "$msg"
    fi
    after=$(big_state)
    check "$(same "$before" "$after")" "A #$rep: target unchanged (count, content hash, table UUID)" "$(echo "$after" | tr '\n' ' ')"
    owned_after=$(owned_tables)
    check "$(same "$owned_before" "$owned_after")" "A #$rep: no _dpone_ table left behind" "before: ${owned_before:-none}; after: ${owned_after:-none}"

    # B: raised limits, must move everything.
    rc=0
    bump_source_xid
    measure_sampled "$BIG" dpone_bigvalue_raised "$rep" -- "$DPONE" run "$TMP/big_raised/manifest.yaml" --interval-end "$INTERVAL_END" --format json || rc=$?
    check "$(same "$rc $(dpone_status)" "0 succeeded")" "B #$rep: raised limits: run succeeded" "exit $rc, status $(dpone_status)"
    ch_big=$(chq "SELECT length(payload) || ' ' || lower(hex(MD5(payload))) FROM dpone_bench.$BIG WHERE id = $BIG_ID")
    check "$(same "$ch_big" "$pg_big")" "B #$rep: the 10 MiB value arrived intact (length and md5)" "PostgreSQL: $pg_big; ClickHouse: $ch_big"
    ch_all=$(chq "SELECT count() || ' ' || lower(hex(MD5(arrayStringConcat(arrayMap(x -> x.2, arraySort(groupArray((id, payload)))), '|')))) FROM dpone_bench.$BIG WHERE ts >= $WIN_START_CH AND ts < $WIN_END_CH")
    check "$(same "$ch_all" "$pg_all")" "B #$rep: every window row and payload equal (count, md5 of the payloads in id order)" "PostgreSQL: $pg_all; ClickHouse: $ch_all"
    kept=$(chq "SELECT count() FROM dpone_bench.$BIG WHERE label = 'kept'")
    check "$(same "$kept" 100)" "B #$rep: the 100 rows before the window kept" "$kept"
    drop_ch_backups
  done
fi

# ------------------------------------------------------------------ report --

python3 -c 'import json,sys; print(json.dumps([json.loads(l) for l in open(sys.argv[1]) if l.strip()]))' "$CHECKS" >"$TMP/checks.json"
sizes_json=$(IFS=,; echo "[${SIZE_JSON[*]}]")
if [ "$ROUTE" = pg_to_clickhouse ]; then
  big_meta=(
    "bigvalue_native_chunks={\"default\": \"$DEFAULT_NC\", \"raised\": \"$RAISED_NC\"}"
    "bigvalue={\"table\": \"$BIG\", \"rows\": $BIG_ROWS, \"big_row_id\": $BIG_ID, \"big_value_chars\": $BIG_LEN, \"seed\": \"$big_seed\"}"
  )
  OUT=$OUT_DIR/memory-$STAMP.json
else
  big_meta=("bigvalue={\"skipped\": \"part 2 is PostgreSQL -> ClickHouse only (ROUTE=ch_to_postgres)\"}")
  OUT=$OUT_DIR/memory-ch_to_postgres-$STAMP.json
fi
bench_meta \
  "route=\"$ROUTE\"" \
  "repeat=$REPEAT" "parallelism=$PARALLELISM" \
  "sizes=$sizes_json" \
  "targets={\"rss_max_mib\": $RSS_MAX_MIB, \"rss_flat_pct\": $RSS_FLAT_PCT, \"issue_rss_max_mib\": $ISSUE_RSS_MIB}" \
  "window={\"column\": \"ts\", \"start\": \"2026-09-02T00:00:00Z\", \"end\": \"2026-09-09T00:00:00Z\", \"chunk_interval\": \"$CHUNK_INTERVAL\"}" \
  "native_chunks_default=\"$DEFAULT_NC\"" \
  "${big_meta[@]}" \
  >"$TMP/meta.json"
python3 "$UTIL" report-memory "$TMP/meta.json" "$RESULTS" "$TMP/checks.json" "$OUT"
log "done in $(($(date +%s) - START_EPOCH)) s; results in $OUT"

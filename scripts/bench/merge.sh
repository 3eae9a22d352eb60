#!/usr/bin/env bash
# Benchmark: what an `incremental_merge` costs next to an
# `incremental_append` of the same batch, ClickHouse -> PostgreSQL, and how a
# small merge's cost grows with the target.
#
#   scripts/bench/merge.sh
#
# Data: a ClickHouse source dpone_bench.merge_src_<B>_<T> holding one batch of
# B rows (columns id Int64, ver Int64, ts DateTime64(6, 'UTC'), v Float64,
# s String), keys T - B/2 .. T + B/2 - 1, ver 2: half of them update keys of
# the target, half are new. The PostgreSQL target dpone_bench.merge_t is
# rebuilt before every measurement with T rows (keys 0 .. T - 1, ver 1),
# then VACUUM ANALYZE and CHECKPOINT, its mark removed and the run's work
# directory emptied: every run reads the whole batch as its first.
#
# Cases (each timed with /usr/bin/time: wall seconds, peak RSS), REPEAT times:
#   big (B = BIG_BATCH, T = BIG_TARGET):
#     append_index    incremental_append, the target with an index on id
#     merge_index     incremental_merge by id, the target with a UNIQUE index on id
#     append_noindex  incremental_append, the target without an index
#     merge_noindex   incremental_merge by id, the target without an index
#   scale (B = SMALL_BATCH, T = each of SCALE_TARGETS, a UNIQUE index on id):
#     merge_<T>
#   ch_scale: the other route, PostgreSQL -> ClickHouse: the batch in the
#     PostgreSQL table dpone_bench.merge_src_<B>_<T> (same rows), the
#     ClickHouse target dpone_bench.merge_t (MergeTree ORDER BY id,
#     PARTITION BY intDiv(id, 1000000): the batch touches one partition of
#     the target and adds one), B = SMALL_BATCH, T = each of SCALE_TARGETS:
#     ch_merge_<T>
#
# Environment (all optional):
#   BIG_BATCH      rows of the big batch (default 1500000)
#   BIG_TARGET     target rows of the big cases (default 3000000)
#   SMALL_BATCH    rows of the scale batch (default 10000)
#   SCALE_TARGETS  target rows of the scale cases (default "1000000 20000000")
#   CASE_GROUPS    which groups (default "big scale ch_scale")
#   REPEAT         repetitions per case (default 1)
#   PG_URL, CH_URL, IDLE_WAIT_MAX, IDLE_BUSY_PCT, QUIESCE_QUIET_S, DPONE_SOURCE,
#   SKIP_BUILD, OUT_DIR, KEEP_TMP: as in pg_to_clickhouse.sh
#
# Output: target/bench/merge-<UTC timestamp>.json and a Markdown summary on
# stdout; progress on stderr.
set -euo pipefail

BENCH_NAME=merge
# shellcheck source=scripts/bench/bench_lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/bench_lib.sh"

BIG_BATCH=${BIG_BATCH:-1500000}
BIG_TARGET=${BIG_TARGET:-3000000}
SMALL_BATCH=${SMALL_BATCH:-10000}
SCALE_TARGETS=${SCALE_TARGETS:-1000000 20000000}
CASE_GROUPS=${CASE_GROUPS:-big scale ch_scale}
REPEAT=${REPEAT:-1}
positive_int BIG_BATCH BIG_TARGET SMALL_BATCH REPEAT
for t in $SCALE_TARGETS; do [[ $t =~ ^[1-9][0-9]*$ ]] || die "SCALE_TARGETS holds positive integers (got '$t')"; done
for g in $CASE_GROUPS; do [[ $g == big || $g == scale || $g == ch_scale ]] || die "CASE_GROUPS may hold only big, scale and ch_scale (got '$g')"; done

bench_init
bench_build

# seed_source B T: the ClickHouse batch dpone_bench.merge_src_B_T (reused).
seed_source() {
  local b=$1 t=$2 name=merge_src_$1_$2
  ensure_ch_table "$name" id "id Int64, ver Int64, ts DateTime64(6, 'UTC'), v Float64, s String"
  if [ "$(chq "SELECT count() FROM dpone_bench.$name")" != "$b" ]; then
    chq "TRUNCATE TABLE dpone_bench.$name" >/dev/null
    chq "INSERT INTO dpone_bench.$name SELECT toInt64($t - intDiv($b, 2) + number), 2,
           toDateTime64('2026-09-01 00:00:00', 6, 'UTC') + toIntervalMicrosecond(number * 1000),
           number / 7, concat('v2-', toString(number % 1000)) FROM numbers($b)" >/dev/null
    log "seeded ClickHouse dpone_bench.$name ($b rows)"
  fi
}

# seed_pg_source B T: the same batch in PostgreSQL, dpone_bench.merge_src_B_T (reused).
seed_pg_source() {
  local b=$1 t=$2 name=merge_src_$1_$2
  pgq "CREATE TABLE IF NOT EXISTS dpone_bench.$name (id bigint, ver bigint, ts timestamptz, v double precision, s text)" >/dev/null
  if [ "$(pgq "SELECT count(*) FROM dpone_bench.$name")" != "$b" ]; then
    pgq "TRUNCATE dpone_bench.$name" >/dev/null
    pgq "INSERT INTO dpone_bench.$name SELECT $t - $b / 2 + g, 2, timestamptz '2026-09-01 00:00:00+00' + g * interval '1 millisecond',
           g / 7.0, 'v2-' || (g % 1000) FROM generate_series(0, $b - 1) AS g" >/dev/null
    pgq "VACUUM ANALYZE dpone_bench.$name" >/dev/null
    log "seeded PostgreSQL dpone_bench.$name ($b rows)"
  fi
}

# prepare_ch_target T: the ClickHouse dpone_bench.merge_t with T rows (a new
# table: a new UUID, so no mark).
prepare_ch_target() {
  local t=$1
  drop_ch_leftovers
  drop_ch_backups
  chq "DROP TABLE IF EXISTS dpone_bench.merge_t SYNC" >/dev/null
  chq "CREATE TABLE dpone_bench.merge_t (id Int64, ver Int64, ts DateTime64(6, 'UTC'), v Float64, s String)
         ENGINE = MergeTree PARTITION BY intDiv(id, 1000000) ORDER BY id" >/dev/null
  chq "INSERT INTO dpone_bench.merge_t SELECT toInt64(number), 1,
         toDateTime64('2026-08-01 00:00:00', 6, 'UTC') + toIntervalMicrosecond(number * 1000),
         number / 3, concat('v1-', toString(number % 1000)) FROM numbers($t)" >/dev/null
  chq "OPTIMIZE TABLE dpone_bench.merge_t FINAL" >/dev/null
}

# prepare_target T INDEX: dpone_bench.merge_t with T rows; INDEX unique|plain|none.
prepare_target() {
  local t=$1 index=$2
  pgq "DROP TABLE IF EXISTS dpone_bench.merge_t" >/dev/null
  pgq "CREATE TABLE dpone_bench.merge_t (id bigint, ver bigint, ts timestamptz, v double precision, s text)" >/dev/null
  pgq "INSERT INTO dpone_bench.merge_t SELECT g, 1, timestamptz '2026-08-01 00:00:00+00' + g * interval '1 millisecond',
         g / 3.0, 'v1-' || (g % 1000) FROM generate_series(0, $t - 1) AS g" >/dev/null
  case $index in
    unique) pgq "CREATE UNIQUE INDEX merge_t_id ON dpone_bench.merge_t (id)" >/dev/null ;;
    plain) pgq "CREATE INDEX merge_t_id ON dpone_bench.merge_t (id)" >/dev/null ;;
    none) ;;
    *) die "prepare_target: INDEX is unique, plain or none" ;;
  esac
  pgq "VACUUM ANALYZE dpone_bench.merge_t" >/dev/null
  pgq "DO \$\$ BEGIN IF to_regclass('dpone_bench._dpone_marks') IS NOT NULL THEN
         DELETE FROM dpone_bench._dpone_marks WHERE target_table = 'merge_t'; END IF; END \$\$" >/dev/null
  pg_checkpoint
}

# write_manifest NAME MODE B T [ROUTE]: $TMP/NAME/manifest.yaml; ROUTE
# ch_pg (default) or pg_ch.
write_manifest() {
  local dir=$TMP/$1 key="" src=clickhouse src_conn=BENCH_CH dst=postgres dst_conn=BENCH_PG
  [ "$2" = incremental_merge ] && key=$'\n    unique_key: [id]'
  [ "${5:-ch_pg}" = pg_ch ] && src=postgres src_conn=BENCH_PG dst=clickhouse dst_conn=BENCH_CH
  mkdir -p "$dir"
  cat >"$dir/manifest.yaml" <<EOF
# Written by scripts/bench/merge.sh
kind: dpone.batch.v1
source:
  type: $src
  connection: {connection_type: env, connection_id: $src_conn}
  table: {schema: dpone_bench, name: merge_src_$3_$4}
  options:
    incremental_column: ver
sink:
  type: $dst
  connection: {connection_type: env, connection_id: $dst_conn}
  table: {schema: dpone_bench, name: merge_t}
  strategy:
    mode: $2$key
runtime:
  storage: {work_dir: work}
EOF
}

# one_case GROUP CASE MODE INDEX B T REP: prepares, measures, checks the target.
one_case() {
  local group=$1 case=$2 mode=$3 index=$4 b=$5 t=$6 rep=$7 expect have
  write_manifest "$case" "$mode" "$b" "$t"
  prepare_target "$t" "$index"
  rm -rf "$TMP/$case/work"
  measure "$group" "dpone_$case" "$rep" -- "$DPONE" run "$TMP/$case/manifest.yaml" --format json ||
    die "$case: dpone run failed: $(head -c 3000 "$TMP/last.out")"
  [ "$(dpone_status)" = succeeded ] || die "$case: dpone run status $(dpone_status)"
  if [ "$mode" = incremental_merge ]; then expect=$((t + b - b / 2)); else expect=$((t + b)); fi
  have=$(pgq "SELECT count(*) FROM dpone_bench.merge_t")
  [ "$have" = "$expect" ] || die "$case: the target holds $have rows, expected $expect"
  if [ "$mode" = incremental_merge ]; then
    have=$(pgq "SELECT count(*) FILTER (WHERE ver = 2) || ' ' || count(DISTINCT id) FROM dpone_bench.merge_t")
    [ "$have" = "$b $expect" ] || die "$case: after the merge (rows at ver 2, distinct keys) are '$have', expected '$b $expect'"
  fi
}

# ch_case T REP: the PostgreSQL -> ClickHouse scale case into a T-row target.
ch_case() {
  local t=$1 rep=$2 b=$SMALL_BATCH case=ch_merge_$1 expect have
  write_manifest "$case" incremental_merge "$b" "$t" pg_ch
  prepare_ch_target "$t"
  rm -rf "$TMP/$case/work"
  measure ch_scale "dpone_$case" "$rep" -- "$DPONE" run "$TMP/$case/manifest.yaml" --format json ||
    die "$case: dpone run failed: $(head -c 3000 "$TMP/last.out")"
  [ "$(dpone_status)" = succeeded ] || die "$case: dpone run status $(dpone_status)"
  expect=$((t + b - b / 2))
  have=$(chq "SELECT concat(toString(count()), ' ', toString(countIf(ver = 2)), ' ', toString(uniqExact(id))) FROM dpone_bench.merge_t")
  [ "$have" = "$expect $b $expect" ] || die "$case: (rows, rows at ver 2, distinct keys) are '$have', expected '$expect $b $expect'"
}

for ((rep = 1; rep <= REPEAT; rep++)); do
  for g in $CASE_GROUPS; do
    if [ "$g" = big ]; then
      seed_source "$BIG_BATCH" "$BIG_TARGET"
      one_case big append_index incremental_append plain "$BIG_BATCH" "$BIG_TARGET" "$rep"
      one_case big merge_index incremental_merge unique "$BIG_BATCH" "$BIG_TARGET" "$rep"
      one_case big append_noindex incremental_append none "$BIG_BATCH" "$BIG_TARGET" "$rep"
      one_case big merge_noindex incremental_merge none "$BIG_BATCH" "$BIG_TARGET" "$rep"
    elif [ "$g" = scale ]; then
      for t in $SCALE_TARGETS; do
        seed_source "$SMALL_BATCH" "$t"
        one_case scale "merge_$t" incremental_merge unique "$SMALL_BATCH" "$t" "$rep"
      done
    else
      for t in $SCALE_TARGETS; do
        seed_pg_source "$SMALL_BATCH" "$t"
        ch_case "$t" "$rep"
      done
    fi
  done
done
pgq "DROP TABLE IF EXISTS dpone_bench.merge_t" >/dev/null
chq "DROP TABLE IF EXISTS dpone_bench.merge_t SYNC" >/dev/null

OUT=$OUT_DIR/merge-$STAMP.json
bench_meta "batch_rows={\"big\": $BIG_BATCH, \"scale\": $SMALL_BATCH}" "big_target_rows=$BIG_TARGET" \
  "scale_target_rows=[$(echo "$SCALE_TARGETS" | tr ' ' ',')]" "repeat=$REPEAT" >"$TMP/meta.json"
python3 - "$TMP/meta.json" "$RESULTS" "$OUT" <<'EOF'
import json, statistics, sys
meta = json.load(open(sys.argv[1]))
samples = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
meta["samples"] = samples
json.dump(meta, open(sys.argv[3], "w"), indent=1)
by = {}
for s in samples:
    by.setdefault((s["dataset"], s["case"]), []).append(s)
med = {k: statistics.median(x["wall_s"] for x in v) for k, v in by.items()}
print(f"## merge benchmark ({meta['git']['commit']}{' dirty' if meta['git']['dirty'] else ''}, {meta['started_utc']})\n")
print("| group | case | wall s (median) | peak RSS MiB | phases (s) |")
print("|---|---|---|---|---|")
for (g, c), v in by.items():
    ph = (v[-1].get("dpone") or {}).get("phases") or {}
    phs = ", ".join(f"{k} {x:.2f}" for k, x in ph.items() if isinstance(x, (int, float)) and x >= 0.05)
    print(f"| {g} | {c} | {med[(g, c)]:.2f} | {max(x['rss_kib'] for x in v) / 1024:.1f} | {phs} |")
def ratio(a, b):
    if a in med and b in med:
        print(f"- {a[1]} / {b[1]}: {med[a] / med[b]:.2f}x")
print()
ratio(("big", "dpone_merge_index"), ("big", "dpone_append_index"))
ratio(("big", "dpone_merge_noindex"), ("big", "dpone_append_noindex"))
for group in ("scale", "ch_scale"):
    scale = sorted((int(c.split("_")[-1]), c) for g, c in med if g == group)
    if len(scale) >= 2:
        ratio((group, scale[-1][1]), (group, scale[0][1]))
print(f"\nresults: {sys.argv[3]}")
EOF

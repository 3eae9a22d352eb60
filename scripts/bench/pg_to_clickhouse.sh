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
#   IDLE_WAIT_MAX    before each measurement, wait up to this many seconds for
#                    the machine to be idle (default 60; 0 = do not wait)
#   IDLE_BUSY_PCT    "idle" means: all CPUs less than this % busy over one
#                    second (default 30)
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

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BENCH_DIR=$ROOT/scripts/bench
UTIL=$BENCH_DIR/bench_util.py
DPONE=$ROOT/target/release/dpone

ROWS_NARROW=${ROWS_NARROW:-5000000}
ROWS_WIDE=${ROWS_WIDE:-1000000}
DATASETS=${DATASETS:-narrow wide}
REPEAT=${REPEAT:-3}
PARALLELISM=${PARALLELISM:-2}
IDLE_WAIT_MAX=${IDLE_WAIT_MAX:-60}
IDLE_BUSY_PCT=${IDLE_BUSY_PCT:-30}
OUT_DIR=${OUT_DIR:-$ROOT/target/bench}
INTERVAL_END=2026-09-09T00:00:00Z
WIN_START_PG="2026-09-02 00:00:00+00"
WIN_END_PG="2026-09-09 00:00:00+00"
WIN_START_CH="toDateTime64('2026-09-02 00:00:00', 6, 'UTC')"
WIN_END_CH="toDateTime64('2026-09-09 00:00:00', 6, 'UTC')"
SEED_VERSION=1

log() { echo "bench: $*" >&2; }
die() { log "error: $*"; exit 1; }

for v in ROWS_NARROW ROWS_WIDE REPEAT PARALLELISM IDLE_BUSY_PCT; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer (got '${!v}')"
done
[[ $IDLE_WAIT_MAX =~ ^[0-9]+$ ]] || die "IDLE_WAIT_MAX must be a number of seconds (got '$IDLE_WAIT_MAX')"
for ds in $DATASETS; do
  [[ $ds == narrow || $ds == wide ]] || die "DATASETS may hold only narrow and wide (got '$ds')"
done
for tool in psql curl python3 flock /usr/bin/time; do
  command -v "$tool" >/dev/null || die "$tool is required"
done

mkdir -p "$OUT_DIR"
# One benchmark at a time: it truncates and replaces tables in dpone_bench.
exec 9>"$OUT_DIR/.pg_to_clickhouse.lock"
flock -n 9 || die "another benchmark run holds $OUT_DIR/.pg_to_clickhouse.lock"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/dpone-bench.XXXXXX")
STARTED_SERVICES=0
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ "${KEEP_TMP:-0}" = 1 ]; then
    log "kept $TMP"
  else
    rm -rf "$TMP"
  fi
  if [ "$STARTED_SERVICES" = 1 ]; then
    log "stopping the test services this run started"
    "$ROOT/scripts/services.sh" stop || log "warning: stopping the services failed"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

START_EPOCH=$(date +%s)
STARTED_UTC=$(date -u +%Y-%m-%dT%H:%M:%SZ)
STAMP=$(date -u +%Y%m%dT%H%M%SZ)

# ---------------------------------------------------------------- servers --

if [ -z "${PG_URL:-}" ] || [ -z "${CH_URL:-}" ]; then
  if "$ROOT/scripts/services.sh" status >/dev/null 2>&1; then
    log "using the running test services"
  else
    log "starting the test services (scripts/services.sh start)"
    STARTED_SERVICES=1
    "$ROOT/scripts/services.sh" start
  fi
  eval "$("$ROOT/scripts/services.sh" env)"
  PG_URL=${PG_URL:-$DPONE_TEST_POSTGRES_URL}
  CH_URL=${CH_URL:-$DPONE_TEST_CLICKHOUSE_URL}
fi
CH=${CH_URL%%\?*}
CH=${CH%/}
psql "$PG_URL" -X -qtAc "SELECT 1" >/dev/null || die "PostgreSQL at PG_URL does not answer"
[ "$(curl -sS --max-time 5 "$CH/ping" 2>/dev/null)" = "Ok." ] || die "ClickHouse at CH_URL does not answer /ping"

# Runs one ClickHouse statement (body); prints the response; fails on errors.
chq() { curl -sS --fail-with-body "$CH/" --data-binary "$1"; }
pgq() { psql "$PG_URL" -X -qtAc "$1"; }

# host, port, user, password, database of PG_URL (for postgresql()).
mapfile -t PG_PARTS < <(python3 "$UTIL" pg-parts "$PG_URL")
[ "${#PG_PARTS[@]}" -eq 5 ] || die "could not parse PG_URL"
PGH=${PG_PARTS[0]} PGP=${PG_PARTS[1]} PGU=${PG_PARTS[2]} PGPW=${PG_PARTS[3]} PGDB=${PG_PARTS[4]}

# ------------------------------------------------------------------ build --

# DPONE_SOURCE=worktree (default): build this working tree, as it is.
# DPONE_SOURCE=head: build a clean export of the HEAD commit in
# target/bench/head-src (target dir target/bench/head-target), so that the
# numbers belong to exactly one commit even while others edit the tree.
case ${DPONE_SOURCE:-worktree} in
  worktree)
    if [ "${SKIP_BUILD:-0}" = 1 ]; then
      log "SKIP_BUILD=1: using $DPONE as it is"
    else
      log "building dpone (cargo build --release -p dpone-cli)"
      (cd "$ROOT" && cargo build --release -p dpone-cli >&2)
    fi
    [ -x "$DPONE" ] || die "$DPONE is missing"
    # The tree the binary was built from (others may commit while this runs).
    BENCH_COMMIT=$(git -C "$ROOT" rev-parse --short HEAD)
    BENCH_CHANGED=$(git -C "$ROOT" status --porcelain | wc -l)
    BENCH_DIFF_SHA=$(git -C "$ROOT" diff HEAD | sha256sum | cut -c1-16)
    BENCH_SOURCE="working tree"
    ;;
  head)
    BENCH_COMMIT=$(git -C "$ROOT" rev-parse --short HEAD)
    log "building dpone from a clean export of commit $BENCH_COMMIT"
    rm -rf "$OUT_DIR/head-src"
    mkdir -p "$OUT_DIR/head-src"
    git -C "$ROOT" archive "$BENCH_COMMIT" | tar -x -C "$OUT_DIR/head-src"
    (cd "$OUT_DIR/head-src" &&
      CARGO_TARGET_DIR=$OUT_DIR/head-target cargo build --release -p dpone-cli >&2)
    DPONE=$OUT_DIR/head-target/release/dpone
    BENCH_CHANGED=0
    BENCH_DIFF_SHA=$(: | sha256sum | cut -c1-16)
    BENCH_SOURCE="clean export of the commit"
    ;;
  *) die "DPONE_SOURCE must be worktree or head" ;;
esac
BENCH_DIRTY=$([ "$BENCH_CHANGED" -gt 0 ] && echo 1 || echo 0)
# A private copy: others may rebuild target/release/dpone during the run.
cp "$DPONE" "$TMP/dpone"
DPONE=$TMP/dpone
log "dpone built from commit $BENCH_COMMIT ($BENCH_CHANGED changed paths in the working tree)"

# ------------------------------------------------------------------- seed --

rows_of() { if [ "$1" = narrow ]; then echo "$ROWS_NARROW"; else echo "$ROWS_WIDE"; fi; }

seed_postgres() {
  local ds=$1 rows marker have t0
  rows=$(rows_of "$ds")
  marker="dpone bench seed v$SEED_VERSION: $ds rows=$rows"
  have=$(pgq "SELECT obj_description(to_regclass('dpone_bench.$ds'), 'pg_class')" 2>/dev/null || true)
  if [ "$have" = "$marker" ] && [ "$(pgq "SELECT count(*) FROM dpone_bench.$ds")" = "$rows" ]; then
    log "$ds: PostgreSQL table dpone_bench.$ds is seeded ($rows rows), reusing it"
    echo reused >"$TMP/$ds.seed"
    return
  fi
  log "$ds: seeding PostgreSQL dpone_bench.$ds with $rows rows (once; reused by later runs)"
  t0=$(date +%s)
  psql "$PG_URL" -X -q -v table="$ds" -v rows="$rows" -v marker="$marker" -f "$BENCH_DIR/seed_postgres.sql" >&2
  echo "created in $(($(date +%s) - t0)) s" >"$TMP/$ds.seed"
  log "$ds: seeded in $(($(date +%s) - t0)) s"
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
  local ds=$1 cols want have t
  chq "CREATE DATABASE IF NOT EXISTS dpone_bench ENGINE = Atomic" >/dev/null
  [ "$(chq "SELECT engine FROM system.databases WHERE name = 'dpone_bench'")" = Atomic ] ||
    die "ClickHouse database dpone_bench exists but is not Atomic; drop it and rerun"
  # One line, as system.columns reports it: "name type, name type, ...".
  cols=$(ch_columns "$ds" | tr '\n' ' ' | sed 's/  */ /g; s/ $//')
  want=$cols
  for t in "$ds" "${ds}_raw" "${ds}_pgfn"; do
    have=$(chq "SELECT arrayStringConcat(arrayMap(x -> x.2, arraySort(groupArray((position, concat(name, ' ', type))))), ', ') FROM system.columns WHERE database = 'dpone_bench' AND table = '$t' FORMAT TSVRaw")
    if [ "$have" = "$want" ] &&
      [ "$(chq "SELECT engine FROM system.tables WHERE database = 'dpone_bench' AND name = '$t'")" = MergeTree ]; then
      continue
    fi
    [ -z "$have" ] || log "$ds: ClickHouse table dpone_bench.$t has another structure, recreating it"
    chq "DROP TABLE IF EXISTS dpone_bench.$t SYNC" >/dev/null
    chq "CREATE TABLE dpone_bench.$t ($cols) ENGINE = MergeTree ORDER BY id" >/dev/null
    log "$ds: created ClickHouse table dpone_bench.$t"
  done
  # Tables an interrupted earlier run left behind (the lock above makes sure
  # no other benchmark is running): a generation table would block dpone.
  for t in $(chq "SELECT name FROM system.tables WHERE database = 'dpone_bench' AND (startsWith(name, '_dpone_gen_') OR startsWith(name, '_dpone_stg_'))"); do
    log "$ds: dropping leftover dpone_bench.$t"
    chq "DROP TABLE IF EXISTS dpone_bench.$t SYNC" >/dev/null
  done
}

write_manifest() {
  local ds=$1 dir=$TMP/$1
  mkdir -p "$dir"
  cat >"$dir/manifest.yaml" <<EOF
# Written by scripts/bench/pg_to_clickhouse.sh
kind: dpone.batch.v1
source:
  type: postgres
  connection: {connection_type: env, connection_id: BENCH_PG}
  table: {schema: dpone_bench, name: $ds}
  options:
    native_transfer:
      execution:
        chunking: {mode: bounded_window, parallelism: $PARALLELISM, checkpointing: resumable}
sink:
  type: clickhouse
  connection: {connection_type: env, connection_id: BENCH_CH}
  table: {schema: dpone_bench, name: $ds}
  strategy:
    mode: replace
    atomicity: target_atomic
    window: {column: ts, anchor: data_interval_end, lookback: P7D, chunk_interval: P1D, timezone: UTC}
runtime:
  storage: {work_dir: work}
EOF
}
export DPONE_CONN_BENCH_PG=$PG_URL DPONE_CONN_BENCH_CH=$CH/

# ---------------------------------------------------------------- measure --

RESULTS=$TMP/results.jsonl
: >"$RESULTS"

# Waits (up to 60 s) until ClickHouse runs no merges or mutations in
# dpone_bench, so that a measurement does not pay for the previous one's
# background work; prints the seconds waited.
quiesce() {
  local t0=$SECONDS
  while [ $((SECONDS - t0)) -lt 60 ]; do
    [ "$(chq "SELECT (SELECT count() FROM system.merges WHERE database = 'dpone_bench') + (SELECT count() FROM system.mutations WHERE database = 'dpone_bench' AND NOT is_done)")" = 0 ] && break
    sleep 0.5
  done
  echo $((SECONDS - t0))
}

# measure DATASET CASE REP -- command...: times the command, appends a JSON
# line to $RESULTS; the command's stdout is kept in $TMP/last.out.
# Returns the command's exit status (the line then has ok=false).
measure() {
  local ds=$1 case=$2 rep=$3 waited load1 busy rc=0 wall rss usr sys extra=null
  shift 4
  waited=$(quiesce)
  # On a shared machine, wait (up to IDLE_WAIT_MAX s) for a second in which
  # the CPUs are less than IDLE_BUSY_PCT busy; the last sample is recorded.
  local t0=$SECONDS idle_waited
  while :; do
    busy=$(python3 "$UTIL" cpu-busy 1)
    awk -v b="$busy" -v m="$IDLE_BUSY_PCT" 'BEGIN { exit !(b < m) }' && break
    [ $((SECONDS - t0)) -lt "$IDLE_WAIT_MAX" ] || break
  done
  idle_waited=$((SECONDS - t0 - 1))
  load1=$(cut -d' ' -f1 /proc/loadavg)
  log "$ds: $case #$rep (load1 $load1, CPU busy ${busy}% in the last second, waited ${idle_waited} s for idle)"
  /usr/bin/time -f '%e %M %U %S' -o "$TMP/time" "$@" >"$TMP/last.out" 2>"$TMP/last.err" || rc=$?
  read -r wall rss usr sys < <(tail -n 1 "$TMP/time")
  if [ "$rc" -eq 0 ] && [[ $case == dpone_* ]]; then
    extra=$(python3 "$UTIL" dpone-result "$TMP/last.out")
  fi
  local err=""
  if [ "$rc" -ne 0 ]; then
    err=$(cat "$TMP/last.out" "$TMP/last.err" | head -c 2000)
  fi
  python3 - "$ds" "$case" "$rep" "$wall" "$rss" "$usr" "$sys" "$load1" "$busy" "$waited" "$idle_waited" "$rc" "$extra" "$err" >>"$RESULTS" <<'EOF'
import json, sys
ds, case, rep, wall, rss, usr, sys_s, load1, busy, waited, idle_waited, rc, extra, err = sys.argv[1:]
line = {"dataset": ds, "case": case, "rep": int(rep), "wall_s": float(wall), "rss_kib": int(rss),
        "user_s": float(usr), "sys_s": float(sys_s), "load1": float(load1), "cpu_busy_pct": float(busy),
        "quiesce_wait_s": int(waited), "idle_wait_s": int(idle_waited), "ok": rc == "0"}
if extra != "null":
    line["dpone"] = json.loads(extra)
if err:
    line["error"] = err
print(json.dumps(line))
EOF
  log "$ds: $case #$rep: ${wall} s, peak RSS $((rss / 1024)) MiB$([ "$rc" -eq 0 ] || echo ", FAILED (exit $rc)")"
  return "$rc"
}

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

pgfn_sql() {
  echo "INSERT INTO dpone_bench.$1_pgfn SELECT * FROM $(pgfn_source "$1") WHERE ts >= $WIN_START_CH AND ts < $WIN_END_CH"
}

# dpone identifies a run by, among others, the source snapshot it reads
# (pg_current_snapshot()). On an otherwise idle PostgreSQL two runs in a row
# see the same snapshot and therefore get the same run id; at the commit
# this benchmark was written against, the second such run published and
# then failed renaming its backup ("_dpone_bak_<run> already exists"). Each
# dpone run here is therefore preceded by one committed transaction that
# takes a transaction id, as any write on a live source would
# (BUMP_SOURCE_XID=0 turns this off, to check that case).
bump_source_xid() {
  [ "${BUMP_SOURCE_XID:-1}" = 0 ] || pgq "SELECT txid_current()" >/dev/null
}

dpone_run() {
  bump_source_xid
  "$DPONE" run "$TMP/$1/manifest.yaml" --interval-end "$INTERVAL_END" --format json
}

check_dpone() {
  local ds=$1 rows=$2 status
  status=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["status"])' "$TMP/last.out")
  [ "$status" = succeeded ] || die "$ds: dpone run status is $status: $(head -c 2000 "$TMP/last.out")"
  expect_rows "$ds" "$rows"
}

run_dataset() {
  local ds=$1 rows rep same pgfn=1 rb=$TMP/$1.rowbinary
  rows=$(rows_of "$ds")
  seed_postgres "$ds"
  ensure_clickhouse "$ds"
  write_manifest "$ds"
  pgq "SELECT pg_total_relation_size('dpone_bench.$ds')" >"$TMP/$ds.pgbytes"

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
  done

  # Free the scratch tables and dpone's backup generation; keep the target.
  chq "TRUNCATE TABLE dpone_bench.${ds}_raw" >/dev/null
  chq "TRUNCATE TABLE dpone_bench.${ds}_pgfn" >/dev/null
  for t in $(chq "SELECT name FROM system.tables WHERE database = 'dpone_bench' AND startsWith(name, '_dpone_bak_')"); do
    chq "DROP TABLE IF EXISTS dpone_bench.$t SYNC" >/dev/null
  done
  rm -f "$rb"
}

# ------------------------------------------------------------------- main --

for ds in $DATASETS; do
  run_dataset "$ds"
done

# ------------------------------------------------------------------ report --

export BENCH_STARTED_UTC=$STARTED_UTC BENCH_DURATION_S=$(($(date +%s) - START_EPOCH))
export BENCH_PSQL_VERSION BENCH_PG_SERVER BENCH_CH_VERSION BENCH_COMMIT BENCH_DIRTY BENCH_DIFF_SHA BENCH_CHANGED BENCH_SOURCE
BENCH_PSQL_VERSION=$(psql --version)
BENCH_PG_SERVER=$(pgq "SHOW server_version")
BENCH_CH_VERSION=$(chq "SELECT version()")
export BENCH_TMP=$TMP BENCH_DATASETS=$DATASETS BENCH_REPEAT=$REPEAT BENCH_PARALLELISM=$PARALLELISM
export BENCH_IDLE_WAIT_MAX=$IDLE_WAIT_MAX BENCH_IDLE_BUSY_PCT=$IDLE_BUSY_PCT
export BENCH_ROWS_NARROW=$ROWS_NARROW BENCH_ROWS_WIDE=$ROWS_WIDE BENCH_DPONE_VERSION
BENCH_DPONE_VERSION=$("$DPONE" --version)
BENCH_SERVICES="already running, or given by PG_URL/CH_URL"
[ "$STARTED_SERVICES" = 0 ] || BENCH_SERVICES="started by this run"
export BENCH_SERVICES

python3 - >"$TMP/meta.json" <<'EOF'
import json, os, platform
e = os.environ
def read(path, default=""):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return default
cpu = next((l.split(":", 1)[1].strip() for l in read("/proc/cpuinfo").splitlines() if l.startswith("model name")), "unknown")
mem = next((int(l.split()[1]) // 1024 for l in read("/proc/meminfo").splitlines() if l.startswith("MemTotal")), None)
datasets = []
for ds in e["BENCH_DATASETS"].split():
    datasets.append({
        "name": ds,
        "rows": int(e["BENCH_ROWS_NARROW" if ds == "narrow" else "BENCH_ROWS_WIDE"]),
        "seed": read(f"{e['BENCH_TMP']}/{ds}.seed"),
        "pg_total_relation_bytes": int(read(f"{e['BENCH_TMP']}/{ds}.pgbytes", "0") or 0),
        "rowbinary_bytes": int(read(f"{e['BENCH_TMP']}/{ds}.rbbytes", "0") or 0),
        "postgresql_fn_rows_equal_dpone_target": {"1": True, "0": False}.get(read(f"{e['BENCH_TMP']}/{ds}.pgfn_same")),
    })
print(json.dumps({
    "benchmark": "pg_to_clickhouse",
    "started_utc": e["BENCH_STARTED_UTC"],
    "duration_s": int(e["BENCH_DURATION_S"]),
    "machine": {"nproc": os.cpu_count(), "cpu_model": cpu, "mem_total_mib": mem,
                "kernel": platform.release()},
    "versions": {"psql": e["BENCH_PSQL_VERSION"], "postgres_server": e["BENCH_PG_SERVER"],
                 "clickhouse": e["BENCH_CH_VERSION"], "dpone": e["BENCH_DPONE_VERSION"]},
    "git": {"commit": e["BENCH_COMMIT"], "dirty": e["BENCH_DIRTY"] == "1", "built_from": e["BENCH_SOURCE"],
            "changed_paths": int(e["BENCH_CHANGED"]), "diff_sha256_16": e["BENCH_DIFF_SHA"]},
    "services": e["BENCH_SERVICES"],
    "window": {"column": "ts", "start": "2026-09-02T00:00:00Z", "end": "2026-09-09T00:00:00Z",
               "chunk_interval": "P1D"},
    "repeat": int(e["BENCH_REPEAT"]),
    "parallelism": int(e["BENCH_PARALLELISM"]),
    "idle_wait": {"max_s": int(e["BENCH_IDLE_WAIT_MAX"]), "busy_below_pct": int(e["BENCH_IDLE_BUSY_PCT"])},
    "datasets": datasets,
}, indent=2))
EOF

OUT=$OUT_DIR/pg_to_clickhouse-$STAMP.json
python3 "$UTIL" report "$TMP/meta.json" "$RESULTS" "$OUT"
log "done in $(($(date +%s) - START_EPOCH)) s; results in $OUT"

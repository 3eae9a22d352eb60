# shellcheck shell=bash disable=SC2034
# (SC2034: the variables set here are used by the scripts that source it.)
# Shared helpers of the benchmark scripts (pg_to_clickhouse.sh, memory.sh,
# ch_to_postgres.sh): servers, build, idle wait, measuring, seeding, report
# metadata. Source it after `set -euo pipefail`
# with BENCH_NAME set; it reads the environment variables documented in
# docs/benchmarks.md (PG_URL, CH_URL, IDLE_WAIT_MAX, IDLE_BUSY_PCT, QUIESCE_QUIET_S,
# DPONE_SOURCE, SKIP_BUILD, OUT_DIR, KEEP_TMP, BUMP_SOURCE_XID).
#
# After `bench_init`:
#   ROOT BENCH_DIR UTIL OUT_DIR TMP STAMP STARTED_UTC START_EPOCH
#   PG_URL CH  (ClickHouse base URL without query or trailing slash)
#   DPONE      (a private copy of the binary)
#   BENCH_COMMIT BENCH_DIRTY BENCH_CHANGED BENCH_DIFF_SHA BENCH_SOURCE
#   RESULTS    (JSON lines, one per measurement)

# Errors inside $(...) stop the script too.
shopt -s inherit_errexit

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BENCH_DIR=$ROOT/scripts/bench
UTIL=$BENCH_DIR/bench_util.py
OUT_DIR=${OUT_DIR:-$ROOT/target/bench}
IDLE_WAIT_MAX=${IDLE_WAIT_MAX:-60}
IDLE_BUSY_PCT=${IDLE_BUSY_PCT:-30}
QUIESCE_QUIET_S=${QUIESCE_QUIET_S:-3}
INTERVAL_END=2026-09-09T00:00:00Z
WIN_START_PG="2026-09-02 00:00:00+00"
WIN_END_PG="2026-09-09 00:00:00+00"
WIN_START_CH="toDateTime64('2026-09-02 00:00:00', 6, 'UTC')"
WIN_END_CH="toDateTime64('2026-09-09 00:00:00', 6, 'UTC')"

log() { echo "bench${BENCH_NAME:+ $BENCH_NAME}: $*" >&2; }
die() {
  log "error: $*"
  exit 1
}

# Runs one ClickHouse statement (body); prints the response; fails on errors.
chq() { curl -sS --fail-with-body "$CH/" --data-binary "$1"; }
pgq() { psql "$PG_URL" -X -qtAc "$1"; }

positive_int() {
  local v
  for v in "$@"; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer (got '${!v}')"
  done
}

bench_cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ -n "${TMP:-}" ]; then
    if [ "${KEEP_TMP:-0}" = 1 ]; then
      log "kept $TMP"
    else
      rm -rf "$TMP"
    fi
  fi
  if [ "${STARTED_SERVICES:-0}" = 1 ]; then
    log "stopping the test services this run started"
    "$ROOT/scripts/services.sh" stop || log "warning: stopping the services failed"
  fi
  exit "$rc"
}

# Tools, lock, temporary folder, servers.
bench_init() {
  local tool
  for tool in psql curl python3 flock /usr/bin/time; do
    command -v "$tool" >/dev/null || die "$tool is required"
  done
  [[ $IDLE_WAIT_MAX =~ ^[0-9]+$ ]] || die "IDLE_WAIT_MAX must be a number of seconds (got '$IDLE_WAIT_MAX')"
  positive_int IDLE_BUSY_PCT
  [[ $QUIESCE_QUIET_S =~ ^[0-9]+$ ]] || die "QUIESCE_QUIET_S must be a number of seconds (got '$QUIESCE_QUIET_S')"
  mkdir -p "$OUT_DIR"
  # One benchmark at a time, whichever script: they share the servers and
  # the dpone_bench schema/database.
  exec 9>"$OUT_DIR/.pg_to_clickhouse.lock"
  flock -n 9 || die "another benchmark run holds $OUT_DIR/.pg_to_clickhouse.lock"

  TMP=$(mktemp -d "${TMPDIR:-/tmp}/dpone-bench.XXXXXX")
  STARTED_SERVICES=0
  trap bench_cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  START_EPOCH=$(date +%s)
  STARTED_UTC=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  STAMP=$(date -u +%Y%m%dT%H%M%SZ)
  RESULTS=$TMP/results.jsonl
  : >"$RESULTS"

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
  export DPONE_CONN_BENCH_PG=$PG_URL DPONE_CONN_BENCH_CH=$CH/
  chq "CREATE DATABASE IF NOT EXISTS dpone_bench ENGINE = Atomic" >/dev/null
  [ "$(chq "SELECT engine FROM system.databases WHERE name = 'dpone_bench'")" = Atomic ] ||
    die "ClickHouse database dpone_bench exists but is not Atomic; drop it and rerun"
  pgq "CREATE SCHEMA IF NOT EXISTS dpone_bench" >/dev/null 2>&1 || true
}

# DPONE_SOURCE=worktree (default): build this working tree, as it is.
# DPONE_SOURCE=head: build a clean export of the HEAD commit in
# target/bench/head-src (target dir target/bench/head-target).
bench_build() {
  DPONE=$ROOT/target/release/dpone
  case ${DPONE_SOURCE:-worktree} in
    worktree)
      if [ "${SKIP_BUILD:-0}" = 1 ]; then
        log "SKIP_BUILD=1: using $DPONE as it is"
      else
        log "building dpone (cargo build --release -p dpone-cli)"
        (cd "$ROOT" && cargo build --release -p dpone-cli >&2)
      fi
      [ -x "$DPONE" ] || die "$DPONE is missing"
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
}

# Waits (up to 60 s) until ClickHouse has run no merges or mutations in
# dpone_bench for QUIESCE_QUIET_S seconds in a row (default 3), so that a
# measurement does not pay for the previous one's background work; prints
# the seconds waited. ClickHouse starts the merge of freshly written parts
# about a second after the write (seen: the seven parts a dpone run leaves
# merged 1-3 s after it ended, ~2 CPU seconds on 5M narrow rows, paid by
# whatever ran next), so one check right after a run is not enough.
quiesce() {
  local t0=$SECONDS quiet=0 need=$((2 * QUIESCE_QUIET_S))
  while [ $((SECONDS - t0)) -lt 60 ]; do
    if [ "$(chq "SELECT (SELECT count() FROM system.merges WHERE database = 'dpone_bench') + (SELECT count() FROM system.mutations WHERE database = 'dpone_bench' AND NOT is_done)")" = 0 ]; then
      quiet=$((quiet + 1))
      [ "$quiet" -ge "$need" ] && break
    else
      quiet=0
    fi
    sleep 0.5
  done
  echo $((SECONDS - t0))
}

# PostgreSQL: a CHECKPOINT, so that a measurement does not share the disk with
# the checkpoint the previous bulk write triggers.
pg_checkpoint() { pgq "CHECKPOINT" >/dev/null 2>&1 || true; }

# measure GROUP CASE REP -- command...: waits for a quiet machine, times the
# command with /usr/bin/time, appends a JSON line to $RESULTS; the command's
# stdout/stderr are kept in $TMP/last.out / $TMP/last.err. For CASE dpone_*
# the line includes bench_util.py dpone-result of the output (also on
# failure). Returns the command's exit status (the line then has ok=false and
# the exit code).
measure() {
  local group=$1 case=$2 rep=$3 waited load1 busy rc=0 wall rss usr sys extra=null
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
  log "$group: $case #$rep (load1 $load1, CPU busy ${busy}% in the last second, waited ${idle_waited} s for idle)"
  local pg0 ch0 pg1 ch1
  read -r pg0 ch0 < <(python3 "$UTIL" server-cpu "$PG_URL" "$CH")
  /usr/bin/time -f '%e %M %U %S' -o "$TMP/time" "$@" >"$TMP/last.out" 2>"$TMP/last.err" || rc=$?
  read -r pg1 ch1 < <(python3 "$UTIL" server-cpu "$PG_URL" "$CH")
  read -r wall rss usr sys < <(tail -n 1 "$TMP/time")
  if [[ $case == dpone_* ]] && [ -s "$TMP/last.out" ]; then
    extra=$(python3 "$UTIL" dpone-result "$TMP/last.out" 2>/dev/null || echo null)
  fi
  local err=""
  if [ "$rc" -ne 0 ]; then
    err=$(cat "$TMP/last.out" "$TMP/last.err" | head -c 4000)
  fi
  python3 - "$group" "$case" "$rep" "$wall" "$rss" "$usr" "$sys" "$load1" "$busy" "$waited" "$idle_waited" "$rc" "$extra" "$err" \
    "$pg0" "$pg1" "$ch0" "$ch1" >>"$RESULTS" <<'EOF'
import json, sys
group, case, rep, wall, rss, usr, sys_s, load1, busy, waited, idle_waited, rc, extra, err, pg0, pg1, ch0, ch1 = sys.argv[1:]
def delta(a, b):
    return None if "-" in (a, b) else round(float(b) - float(a), 2)
line = {"dataset": group, "case": case, "rep": int(rep), "wall_s": float(wall), "rss_kib": int(rss),
        "user_s": float(usr), "sys_s": float(sys_s), "load1": float(load1), "cpu_busy_pct": float(busy),
        "quiesce_wait_s": int(waited), "idle_wait_s": int(idle_waited), "ok": rc == "0", "exit_code": int(rc),
        "pg_server_cpu_s": delta(pg0, pg1), "ch_server_cpu_s": delta(ch0, ch1)}
if extra != "null":
    line["dpone"] = json.loads(extra)
if err:
    line["error"] = err
print(json.dumps(line))
EOF
  log "$group: $case #$rep: ${wall} s, peak RSS $((rss / 1024)) MiB$([ "$rc" -eq 0 ] || echo ", exit $rc")"
  return "$rc"
}

# A run's id derives from the source snapshot; before each dpone run from
# PostgreSQL, commit one transaction that takes a transaction id, as any
# write on a live source would (see docs/benchmarks.md; BUMP_SOURCE_XID=0
# turns it off).
bump_source_xid() {
  [ "${BUMP_SOURCE_XID:-1}" = 0 ] || pgq "SELECT txid_current()" >/dev/null
}

# The status of the dpone run whose JSON output is in $TMP/last.out.
dpone_status() {
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("status"))' "$TMP/last.out" 2>/dev/null || echo unknown
}

# Drops the backups (_dpone_bak_*) dpone keeps of ClickHouse targets in
# dpone_bench; the lock makes sure they belong to no running benchmark.
drop_ch_backups() {
  local t
  for t in $(chq "SELECT name FROM system.tables WHERE database = 'dpone_bench' AND startsWith(name, '_dpone_bak_')"); do
    chq "DROP TABLE IF EXISTS dpone_bench.$t SYNC" >/dev/null
  done
}

# Machine, versions and commit, as JSON (on stdout); extra "key=json" pairs
# are merged in.
bench_meta() {
  local services="already running, or given by PG_URL/CH_URL"
  [ "${STARTED_SERVICES:-0}" = 0 ] || services="started by this run"
  python3 "$UTIL" meta \
    "benchmark=\"$BENCH_NAME\"" \
    "started_utc=\"$STARTED_UTC\"" \
    "duration_s=$(($(date +%s) - START_EPOCH))" \
    "psql=$(python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$(psql --version)")" \
    "postgres_server=\"$(pgq "SHOW server_version")\"" \
    "clickhouse=\"$(chq "SELECT version()")\"" \
    "dpone=\"$("$DPONE" --version)\"" \
    "commit=\"$BENCH_COMMIT\"" \
    "dirty=$([ "$BENCH_DIRTY" = 1 ] && echo true || echo false)" \
    "built_from=\"$BENCH_SOURCE\"" \
    "changed_paths=$BENCH_CHANGED" \
    "diff_sha256_16=\"$BENCH_DIFF_SHA\"" \
    "services=\"$services\"" \
    "idle_wait={\"max_s\": $IDLE_WAIT_MAX, \"busy_below_pct\": $IDLE_BUSY_PCT}" \
    "$@"
}

# ensure_ch_table TABLE ORDER_BY COLUMNS [ENGINE_SUFFIX]: makes sure
# dpone_bench.TABLE is a MergeTree with exactly COLUMNS ("name type, ...",
# as system.columns prints them); otherwise (re)creates it, empty.
ensure_ch_table() {
  local t=$1 order_by=$2 cols=$3 have
  cols=$(echo "$cols" | tr '\n' ' ' | sed 's/  */ /g; s/^ //; s/ $//')
  have=$(chq "SELECT arrayStringConcat(arrayMap(x -> x.2, arraySort(groupArray((position, concat(name, ' ', type))))), ', ') FROM system.columns WHERE database = 'dpone_bench' AND table = '$t' FORMAT TSVRaw")
  if [ "$have" = "$cols" ] &&
    [ "$(chq "SELECT engine FROM system.tables WHERE database = 'dpone_bench' AND name = '$t'")" = MergeTree ]; then
    return
  fi
  [ -z "$have" ] || log "ClickHouse table dpone_bench.$t has another structure, recreating it"
  chq "DROP TABLE IF EXISTS dpone_bench.$t SYNC" >/dev/null
  chq "CREATE TABLE dpone_bench.$t ($cols) ENGINE = MergeTree ORDER BY $order_by" >/dev/null
  log "created ClickHouse table dpone_bench.$t"
}

# Drops staging and generation tables an interrupted earlier run left in
# dpone_bench (a generation table would block dpone).
drop_ch_leftovers() {
  local t
  for t in $(chq "SELECT name FROM system.tables WHERE database = 'dpone_bench' AND (startsWith(name, '_dpone_gen_') OR startsWith(name, '_dpone_stg_'))"); do
    log "dropping leftover ClickHouse table dpone_bench.$t"
    chq "DROP TABLE IF EXISTS dpone_bench.$t SYNC" >/dev/null
  done
}

# seed_pg_table TABLE SHAPE ROWS [INDEX]: (re)creates dpone_bench.TABLE in
# PostgreSQL with scripts/bench/seed_postgres.sql unless it already holds ROWS
# rows of this seed (its table comment). INDEX=off: no index on ts. Prints
# "reused" or "created in N s".
seed_pg_table() {
  local table=$1 shape=$2 rows=$3 index=${4:-on} marker have t0
  marker="dpone bench seed v${SEED_VERSION:-1}: $table rows=$rows"
  [ "$index" = on ] || marker="$marker index=$index"
  have=$(pgq "SELECT obj_description(to_regclass('dpone_bench.$table'), 'pg_class')" 2>/dev/null || true)
  if [ "$have" = "$marker" ] && [ "$(pgq "SELECT count(*) FROM dpone_bench.$table")" = "$rows" ]; then
    log "PostgreSQL table dpone_bench.$table is seeded ($rows rows), reusing it"
    echo reused
    return
  fi
  log "seeding PostgreSQL dpone_bench.$table ($shape, $rows rows; once, reused by later runs)"
  t0=$(date +%s)
  psql "$PG_URL" -X -q -v table="$table" -v shape="$shape" -v rows="$rows" -v index="$index" -v marker="$marker" \
    -f "$BENCH_DIR/seed_postgres.sql" >&2 || die "seeding dpone_bench.$table failed"
  log "seeded dpone_bench.$table in $(($(date +%s) - t0)) s"
  echo "created in $(($(date +%s) - t0)) s"
}

# write_pg_ch_manifest NAME TABLE [NATIVE_CHUNKS] [TARGET] [DIGEST FILE]:
# $TMP/NAME/manifest.yaml, a PostgreSQL -> ClickHouse `replace` of
# dpone_bench.TABLE's window `ts` (P7D, chunk_interval ${CHUNK_INTERVAL:-P1D},
# parallelism $PARALLELISM) into ClickHouse dpone_bench.TARGET (default
# TABLE), with `native_chunks: NATIVE_CHUNKS` when given. With DIGEST, the
# file is $TMP/NAME/FILE instead and its `execution` also holds
# `verification: {digest: DIGEST}` (one more line, nothing else differs).
write_pg_ch_manifest() {
  write_window_manifest postgres BENCH_PG clickhouse BENCH_CH "$@"
}

# write_window_manifest SOURCE_TYPE SOURCE_CONN SINK_TYPE SINK_CONN NAME TABLE
# [NATIVE_CHUNKS] [TARGET] [DIGEST FILE]: what write_pg_ch_manifest and
# write_ch_pg_manifest write, for the given source and sink types and
# connection ids; the window's lookback is ${LOOKBACK:-P7D} and, when
# DELIVERY is set, its `delivery` is DELIVERY.
write_window_manifest() {
  local src=$1 src_conn=$2 snk=$3 snk_conn=$4
  shift 4
  local table=$2 nc=${3:-} target=${4:-$2} digest=${5:-} file=manifest.yaml dir=$TMP/$1 nl=$'\n' vline=""
  if [ -n "$digest" ]; then
    file=${6:?write_window_manifest: DIGEST needs a FILE}
    vline="        verification: {digest: $digest}"
  fi
  mkdir -p "$dir"
  cat >"$dir/$file" <<EOF
# Written by scripts/bench/$BENCH_NAME.sh
kind: dpone.batch.v1
source:
  type: $src
  connection: {connection_type: env, connection_id: $src_conn}
  table: {schema: dpone_bench, name: $table}
  options:
    native_transfer:
      execution:
        chunking: {mode: bounded_window, parallelism: $PARALLELISM, checkpointing: resumable}
${nc:+        native_chunks: $nc}${vline:+$nl$vline}
sink:
  type: $snk
  connection: {connection_type: env, connection_id: $snk_conn}
  table: {schema: dpone_bench, name: $target}
  strategy:
    mode: replace
    atomicity: target_atomic
    window: {column: ts, anchor: data_interval_end, lookback: ${LOOKBACK:-P7D}, chunk_interval: ${CHUNK_INTERVAL:-P1D}, timezone: UTC${DELIVERY:+, delivery: $DELIVERY}}
runtime:
  storage: {work_dir: work}
EOF
}

# --------------------------------------------- ClickHouse -> PostgreSQL data --
# The ClickHouse sources and PostgreSQL targets of ch_to_postgres.sh and of
# memory.sh ROUTE=ch_to_postgres. SHAPE is narrow or wide.

# The seed version, kept in the ClickHouse table comment with the row count.
CH_SEED_VERSION=1

# ClickHouse columns, as system.columns prints them.
ch_source_columns() {
  if [ "$1" = narrow ]; then
    cat <<'EOF'
id Int64, ts DateTime64(6, 'UTC'), n Int32, amount Decimal(18, 4), s1 String, s2 String
EOF
  else
    cat <<'EOF'
id Int64, ts DateTime64(6, 'UTC'),
i8 Int8, i16 Int16, i32 Int32, i64 Int64,
u8 UInt8, u16 UInt16, u32 UInt32, u64 UInt64,
f32 Float32, f64 Float64, d18 Decimal(18, 4), d38 Decimal(38, 10),
s1 String, s2 String, lc LowCardinality(String), fs FixedString(16), uid UUID,
dt Date, dt32 Date32, ts2 DateTime64(6, 'UTC'), b Bool,
n_i32 Nullable(Int32), n_u64 Nullable(UInt64), n_f64 Nullable(Float64), n_d18 Nullable(Decimal(18, 4)),
n_s Nullable(String), n_uid Nullable(UUID), n_dt Nullable(Date), n_ts Nullable(DateTime64(6, 'UTC')),
n_b Nullable(Bool), lcn LowCardinality(Nullable(String))
EOF
  fi
}

# The PostgreSQL columns: the mapping of `dpone schema type-matrix`
# (Int8/UInt8 -> smallint, UInt16 -> integer, UInt32 -> bigint,
# UInt64 -> numeric(20,0), FixedString -> bytea, Date/Date32 -> date,
# DateTime64(6, 'UTC') -> timestamptz, LowCardinality(String) -> text),
# NOT NULL where the ClickHouse column is not Nullable.
pg_columns() {
  if [ "$1" = narrow ]; then
    cat <<'EOF'
id bigint NOT NULL, ts timestamptz NOT NULL, n integer NOT NULL, amount numeric(18,4) NOT NULL,
s1 text NOT NULL, s2 text NOT NULL
EOF
  else
    cat <<'EOF'
id bigint NOT NULL, ts timestamptz NOT NULL,
i8 smallint NOT NULL, i16 smallint NOT NULL, i32 integer NOT NULL, i64 bigint NOT NULL,
u8 smallint NOT NULL, u16 integer NOT NULL, u32 bigint NOT NULL, u64 numeric(20,0) NOT NULL,
f32 real NOT NULL, f64 double precision NOT NULL, d18 numeric(18,4) NOT NULL, d38 numeric(38,10) NOT NULL,
s1 text NOT NULL, s2 text NOT NULL, lc text NOT NULL, fs bytea NOT NULL, uid uuid NOT NULL,
dt date NOT NULL, dt32 date NOT NULL, ts2 timestamptz NOT NULL, b boolean NOT NULL,
n_i32 integer, n_u64 numeric(20,0), n_f64 double precision, n_d18 numeric(18,4),
n_s text, n_uid uuid, n_dt date, n_ts timestamptz,
n_b boolean, lcn text
EOF
  fi
}

# The rows, from the row number g = 1..rows: arithmetic or MD5 of g only.
# ts increases with g across exactly [2026-09-02, 2026-09-09) UTC with under
# one second of jitter, as in seed_postgres.sql.
ch_select() {
  local cols
  if [ "$1" = narrow ]; then
    cols="g, ts, toInt32(g % 100000),
  toDecimal64(concat(toString(intDiv((g * 7919) % 100000000, 10000)), '.', leftPad(toString((g * 7919) % 10000), 4, '0')), 4),
  concat('customer-', toString(g % 50000)), lower(hex(MD5(toString(g))))"
  else
    cols="g, ts,
  toInt8(toInt32(g % 256) - 128), toInt16(toInt32(g % 65536) - 32768),
  toInt32(toInt64(g * 2654435761 % 4294967296) - 2147483648),
  toInt64(g * 1000003) * if(g % 2 = 0, 1, -1),
  toUInt8(g % 256), toUInt16(g % 65536), toUInt32(g * 2654435761 % 4294967296),
  toUInt64(18446744073709551615) - g * 12345,
  toFloat32((g % 65536) / 4), g / 3,
  toDecimal64(concat(toString(intDiv((g * 7919) % 100000000, 10000)), '.', leftPad(toString((g * 7919) % 10000), 4, '0')), 4),
  toDecimal128(concat(if(g % 3 = 0, '-', ''), toString(g * 98765432109), '.', leftPad(toString(g * 2654435761 % 10000000000), 10, '0')), 10),
  concat('customer-', toString(g % 50000)),
  concat(lower(hex(MD5(toString(g)))), left(lower(hex(MD5(toString(g + 1)))), toUInt32(g % 33))),
  concat('cat-', toString(g % 100)),
  MD5(toString(g)),
  reinterpretAsUUID(MD5(toString(g))),
  toDate('2000-01-01') + toInt32(g % 10000),
  toDate32('1950-01-01') + toInt32(g % 40000),
  addMicroseconds(ts, -toInt64(g % 48) * 3600000000),
  g % 2 = 0,
  if(g % 7 = 0, NULL, toInt32(g % 1000000)),
  if(g % 11 = 0, NULL, g * 7),
  if(g % 7 = 0, NULL, (g % 100000) * 0.01),
  if(g % 11 = 0, NULL, toDecimal64(concat('-', toString(intDiv((g * 104729) % 1000000000, 10000)), '.', leftPad(toString((g * 104729) % 10000), 4, '0')), 4)),
  if(g % 7 = 0, NULL, concat('naïve-', toString(g))),
  if(g % 11 = 0, NULL, reinterpretAsUUID(MD5(concat('-', toString(g))))),
  if(g % 7 = 0, NULL, toDate('2026-09-02') + toInt32(g % 7)),
  if(g % 11 = 0, NULL, addMicroseconds(ts, -toInt64(g % 48) * 3600000000)),
  if(g % 11 = 0, NULL, g % 3 = 0),
  if(g % 13 = 0, NULL, concat('tag-', toString(g % 20)))"
  fi
  cat <<EOF
SELECT $cols
FROM (
  SELECT number + 1 AS g,
         addMicroseconds(toDateTime64('2026-09-02 00:00:00', 6, 'UTC'),
           toInt64(least(604800000000 - 1, intDiv(toUInt128(g - 1) * 604800000000, $2) + (g * 7919) % 1000000))) AS ts
  FROM numbers($2)
)
EOF
}

# seed_ch_table TABLE SHAPE ROWS [LABEL]: makes sure the ClickHouse source
# dpone_bench.TABLE is a MergeTree ORDER BY (ts, id) with the columns of
# SHAPE holding ch_select SHAPE ROWS, unless it already holds ROWS rows of
# this seed (its table comment); LABEL prefixes the log lines. Prints
# "reused" or "created in N s".
seed_ch_table() {
  local t=$1 shape=$2 rows=$3 p=${4:+$4: } marker t0
  marker="dpone bench ch seed v$CH_SEED_VERSION: $t rows=$rows"
  ensure_ch_table "$t" "(ts, id)" "$(ch_source_columns "$shape")"
  if [ "$(chq "SELECT comment FROM system.tables WHERE database = 'dpone_bench' AND name = '$t'")" = "$marker" ] &&
    [ "$(chq "SELECT count() FROM dpone_bench.$t")" = "$rows" ]; then
    log "${p}ClickHouse table dpone_bench.$t is seeded ($rows rows), reusing it"
    echo reused
    return
  fi
  log "${p}seeding ClickHouse dpone_bench.$t with $rows rows (once; reused by later runs)"
  t0=$(date +%s)
  chq "ALTER TABLE dpone_bench.$t MODIFY COMMENT ''" >/dev/null
  chq "TRUNCATE TABLE dpone_bench.$t" >/dev/null
  chq "INSERT INTO dpone_bench.$t $(ch_select "$shape" "$rows")" >/dev/null
  chq "OPTIMIZE TABLE dpone_bench.$t FINAL" >/dev/null
  chq "ALTER TABLE dpone_bench.$t MODIFY COMMENT '$marker'" >/dev/null
  echo "created in $(($(date +%s) - t0)) s"
  log "${p}seeded in $(($(date +%s) - t0)) s"
}

# ensure_pg_table TABLE SHAPE [LABEL]: makes sure the PostgreSQL table
# dpone_bench.TABLE has the columns of SHAPE (pg_columns); otherwise
# (re)creates it, empty, with an index on ts. LABEL prefixes the log lines.
ensure_pg_table() {
  local tbl=$1 shape=$2 p=${3:+$3: } cols want have
  cols=$(pg_columns "$shape" | tr '\n' ' ' | sed 's/  */ /g; s/ $//')
  # What format_type would print, to compare with the catalog.
  want=$(echo "$cols" | sed 's/, /\n/g' | sed 's/ NOT NULL$/ NN/; s/ timestamptz/ timestamp with time zone/' |
    paste -sd, -)
  have=$(pgq "SELECT string_agg(attname || ' ' || format_type(atttypid, atttypmod) || CASE WHEN attnotnull THEN ' NN' ELSE '' END, ',' ORDER BY attnum) FROM pg_attribute WHERE attrelid = to_regclass('dpone_bench.$tbl') AND attnum > 0 AND NOT attisdropped")
  if [ "$have" = "$want" ]; then
    return
  fi
  [ -z "$have" ] || log "${p}PostgreSQL table dpone_bench.$tbl has another structure, recreating it"
  pgq "DROP TABLE IF EXISTS dpone_bench.$tbl" >/dev/null
  pgq "CREATE TABLE dpone_bench.$tbl ($cols)" >/dev/null
  pgq "CREATE INDEX ON dpone_bench.$tbl (ts)" >/dev/null
  log "${p}created PostgreSQL table dpone_bench.$tbl"
}

# write_ch_pg_manifest NAME TABLE [NATIVE_CHUNKS] [TARGET]:
# $TMP/NAME/manifest.yaml, a ClickHouse -> PostgreSQL `replace` of ClickHouse
# dpone_bench.TABLE's window `ts` (P7D, chunk_interval ${CHUNK_INTERVAL:-P1D},
# parallelism $PARALLELISM) into PostgreSQL dpone_bench.TARGET (default
# TABLE), with `native_chunks: NATIVE_CHUNKS` when given: write_pg_ch_manifest
# with source and sink swapped (used by memory.sh; ch_to_postgres.sh writes
# its own manifests).
write_ch_pg_manifest() {
  write_window_manifest clickhouse BENCH_CH postgres BENCH_PG "$1" "$2" "${3:-}" "${4:-$2}"
}

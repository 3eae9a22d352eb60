# shellcheck shell=bash disable=SC2034
# (SC2034: the variables set here are used by the scripts that source it.)
# The 30-day window of narrow rows shared by changed_delivery.sh and
# audit.sh: its bounds and the seeding of its PostgreSQL and ClickHouse
# sources. Source it after bench_lib.sh, with ROWS set.
#
# Rows (id bigint, ts, v bigint, s text of 32 characters) spread evenly
# over the window's 30 days (lookback P30D, chunk_interval P1D: 30 chunks):
#   PostgreSQL dpone_bench.cd_src_<ROWS> (primary key id, index on ts),
#     seeded once and reused (changed_delivery.sh's changes undone)
#   ClickHouse dpone_bench.cd_chsrc PARTITION BY toYYYYMMDD(ts) ORDER BY id,
#     created afresh

# The PostgreSQL source, one per size (reused by a later run when kept).
PGSRC=cd_src_$ROWS

CD_INTERVAL_END=2026-09-09T00:00:00Z
# The window of CD_INTERVAL_END with lookback P30D.
CD_START_PG="2026-08-10 00:00:00+00"
CD_END_PG="2026-09-09 00:00:00+00"
CD_START_CH="toDateTime64('2026-08-10 00:00:00', 6, 'UTC')"
CD_END_CH="toDateTime64('2026-09-09 00:00:00', 6, 'UTC')"
SPAN_US=$((30 * 86400 * 1000000))
# The changed days (chunk indexes) and their partition ids.
DAY_UPDATE=12 DAY_DELETE=3 DAY_LATE=27
PART_UPDATE=20260822 PART_DELETE=20260813
EXPECT_CHANGED="3,12,27"

# The id of the row in the middle of day DAY of a source of N rows: row g
# lies at (g - 1) * SPAN_US / N microseconds after the window's start.
mid_id() { echo $(($1 * $2 / 30 + $2 / 60 + 1)); }

# The timestamp of row g of a source of N rows, as PostgreSQL SQL (numeric:
# (g - 1) * SPAN_US overflows bigint).
pg_ts() { echo "timestamptz '$CD_START_PG' + div((g - 1)::numeric * $SPAN_US, $1)::bigint * interval '1 microsecond'"; }

# ---------------------------------------------------------------- sources --

# The PostgreSQL source, seeded once (its comment marks the seed) and
# reused: the changes of an earlier run are undone first.
seed_pg_source() {
  # Two statements: `local` expands every word before assigning any, so
  # one would read $n before it is set (changed_delivery.sh's global n hid it).
  local n=$1
  local marker="dpone bench changed_delivery seed v1: rows=$n" have t0 upd del
  upd=$(mid_id $DAY_UPDATE "$n")
  del=$(mid_id $DAY_DELETE "$n")
  have=$(pgq "SELECT obj_description(to_regclass('dpone_bench.$PGSRC'), 'pg_class')" 2>/dev/null || true)
  if [ "$have" = "$marker" ]; then
    log "PostgreSQL dpone_bench.$PGSRC is seeded ($n rows): undoing an earlier run's changes"
    pgq "DELETE FROM dpone_bench.$PGSRC WHERE id > $n" >/dev/null
    pgq "INSERT INTO dpone_bench.$PGSRC SELECT g, $(pg_ts "$n"), \
(g * 7919) % 1000000007, md5(g::text) FROM generate_series($del::bigint, $del) g ON CONFLICT (id) DO NOTHING" >/dev/null
    pgq "UPDATE dpone_bench.$PGSRC SET v = (id * 7919) % 1000000007 WHERE id = $upd AND v <> (id * 7919) % 1000000007" >/dev/null
    if [ "$(pgq "SELECT count(*) FROM dpone_bench.$PGSRC")" = "$n" ]; then
      pgq "VACUUM ANALYZE dpone_bench.$PGSRC" >/dev/null
      echo reused
      return
    fi
    log "dpone_bench.$PGSRC does not hold $n rows, reseeding"
  fi
  log "seeding PostgreSQL dpone_bench.$PGSRC with $n rows"
  t0=$(date +%s)
  psql "$PG_URL" -X -q -v ON_ERROR_STOP=1 >&2 <<EOF
DROP TABLE IF EXISTS dpone_bench.$PGSRC;
CREATE TABLE dpone_bench.$PGSRC (id bigint NOT NULL, ts timestamptz NOT NULL, v bigint NOT NULL, s text NOT NULL);
INSERT INTO dpone_bench.$PGSRC
SELECT g, $(pg_ts "$n"),
       (g * 7919) % 1000000007, md5(g::text)
FROM generate_series(1::bigint, $n) g;
ALTER TABLE dpone_bench.$PGSRC ADD PRIMARY KEY (id);
CREATE INDEX ON dpone_bench.$PGSRC (ts);
VACUUM ANALYZE dpone_bench.$PGSRC;
COMMENT ON TABLE dpone_bench.$PGSRC IS '$marker';
EOF
  log "seeded in $(($(date +%s) - t0)) s"
  echo "created in $(($(date +%s) - t0)) s"
}

# The ClickHouse source, created afresh (fast), one part per partition.
seed_ch_source() {
  local n=$1 t0
  t0=$(date +%s)
  log "seeding ClickHouse dpone_bench.cd_chsrc with $n rows"
  chq "DROP TABLE IF EXISTS dpone_bench.cd_chsrc SYNC" >/dev/null
  chq "CREATE TABLE dpone_bench.cd_chsrc (id Int64, ts DateTime64(6, 'UTC'), v Int64, s String) \
ENGINE = MergeTree PARTITION BY toYYYYMMDD(ts) ORDER BY id" >/dev/null
  chq "INSERT INTO dpone_bench.cd_chsrc SELECT g, addMicroseconds($CD_START_CH, toInt64(intDiv(toInt128(g - 1) * $SPAN_US, $n))), \
(g * 7919) % 1000000007, lower(hex(MD5(toString(g)))) FROM (SELECT toInt64(number + 1) AS g FROM numbers($n)) \
SETTINGS max_partitions_per_insert_block = 0" >/dev/null
  chq "OPTIMIZE TABLE dpone_bench.cd_chsrc FINAL" >/dev/null
  echo "created in $(($(date +%s) - t0)) s"
}


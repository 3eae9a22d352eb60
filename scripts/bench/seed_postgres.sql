-- dpone benchmark data, PostgreSQL side. Run by scripts/bench/pg_to_clickhouse.sh
-- and scripts/bench/memory.sh with psql variables:
--   table  the table to (re)create in schema dpone_bench
--   shape  optional: 'narrow', 'wide' or 'bigvalue' (default: the table name,
--          so table=narrow / table=wide keep their shapes)
--   rows   number of rows
--   marker the table comment written last (a half-seeded table has none)
--   index  optional: 'off' creates no index on ts (the unindexed-source case
--          of pg_to_clickhouse.sh); default 'on'
--
-- Shape 'bigvalue' (memory.sh): id, ts, n, label text, payload text; every
-- payload is short (0 to 160 characters) except the one of row
-- id = rows / 2 + 1, which is 10 MiB (327680 md5 hex strings, concatenated).
--
-- Deterministic: every value is arithmetic (or md5) on the row number g;
-- there is no random() anywhere. ts increases with id across exactly the
-- 7 days [2026-09-02, 2026-09-09) UTC, with a jitter of under one second
-- (events appended over time), clamped so that every row stays inside.
-- div() on numeric is exact integer division, the same values as bigint
-- division, without its overflow above ~15 million rows.

\set ON_ERROR_STOP on
SET client_min_messages = warning;
CREATE SCHEMA IF NOT EXISTS dpone_bench;
SET search_path = dpone_bench;

\if :{?table}
\else
  \echo 'psql variable table is required'
  \quit
\endif

\if :{?shape}
\else
  \set shape :table
\endif
\if :{?index}
\else
  \set index on
\endif
SELECT :'index' <> 'off' AS with_index \gset
SELECT :'shape' = 'narrow' AS is_narrow, :'shape' = 'wide' AS is_wide,
       :'shape' = 'bigvalue' AS is_bigvalue \gset
\if :is_narrow
\elif :is_wide
\elif :is_bigvalue
\else
  DO $$ BEGIN RAISE EXCEPTION 'psql variable shape (or table) must be narrow, wide or bigvalue'; END $$;
\endif

DROP TABLE IF EXISTS dpone_bench.:"table";

\if :is_narrow
CREATE TABLE dpone_bench.:"table" (
  id     bigint        NOT NULL,
  ts     timestamptz   NOT NULL,
  n      int           NOT NULL,
  amount numeric(18,4) NOT NULL,
  s1     text          NOT NULL,
  s2     text          NOT NULL
);
INSERT INTO dpone_bench.:"table"
SELECT
  g,
  timestamptz '2026-09-02 00:00:00+00' + interval '1 microsecond' *
    LEAST(604800000000 - 1,
          div((g - 1)::numeric * 604800000000, :rows)::bigint + (g * 7919) % 1000000),
  (g % 100000)::int,
  ((g * 7919) % 100000000)::numeric / 10000,
  'customer-' || (g % 50000),
  md5(g::text)
FROM generate_series(1::bigint, :rows::bigint) AS g;
\elif :is_wide
CREATE TABLE dpone_bench.:"table" (
  id       bigint         NOT NULL,
  ts       timestamptz    NOT NULL,
  i1       int            NOT NULL,
  i2       int,
  i3       int            NOT NULL,
  si1      smallint       NOT NULL,
  si2      smallint,
  b1       bigint         NOT NULL,
  b2       bigint,
  b3       bigint         NOT NULL,
  f1       double precision NOT NULL,
  f2       double precision,
  r1       real           NOT NULL,
  d1       numeric(18,4)  NOT NULL,
  d2       numeric(18,4),
  d3       numeric(38,10) NOT NULL,
  t1       text           NOT NULL,
  t2       text           NOT NULL,
  t3       text           NOT NULL,
  t4       text,
  t5       varchar(64)    NOT NULL,
  u1       uuid           NOT NULL,
  u2       uuid,
  dt1      date           NOT NULL,
  dt2      date,
  flag1    boolean        NOT NULL,
  flag2    boolean,
  ts2      timestamp      NOT NULL,
  ts3      timestamp,
  ts4      timestamptz
);
INSERT INTO dpone_bench.:"table"
SELECT
  g,
  ts,
  (g % 1000000)::int,
  CASE WHEN g % 7 = 0 THEN NULL ELSE (g * 31 % 2000000000)::int - 1000000000 END,
  (g % 3)::int,
  (g % 32000)::smallint,
  CASE WHEN g % 11 = 0 THEN NULL ELSE (g % 200 - 100)::smallint END,
  g * 1000003,
  CASE WHEN g % 11 = 0 THEN NULL ELSE -g * 7 END,
  g % 10,
  g::float8 / 3,
  CASE WHEN g % 7 = 0 THEN NULL ELSE (g % 100000)::float8 * 0.01 END,
  (g % 65536)::real / 4,
  ((g * 7919) % 100000000)::numeric / 10000,
  CASE WHEN g % 11 = 0 THEN NULL ELSE -((g * 104729) % 1000000000)::numeric / 10000 END,
  (g::numeric * 98765432109876543 + g % 9973)::numeric / 10000000000,
  'k' || (g % 1000),
  md5(g::text),
  md5(g::text) || md5((g + 1)::text) || md5((g + 2)::text),
  CASE WHEN g % 7 = 0 THEN NULL ELSE 'naïve-' || g END,
  left(repeat(md5((g * 3)::text), 2), (g % 64)::int),
  md5(g::text)::uuid,
  CASE WHEN g % 11 = 0 THEN NULL ELSE md5((-g)::text)::uuid END,
  date '2000-01-01' + (g % 10000)::int,
  CASE WHEN g % 7 = 0 THEN NULL ELSE date '2026-09-02' + (g % 7)::int END,
  g % 2 = 0,
  CASE WHEN g % 11 = 0 THEN NULL ELSE g % 3 = 0 END,
  ts AT TIME ZONE 'UTC',
  CASE WHEN g % 7 = 0 THEN NULL ELSE timestamp '2020-01-01 00:00:00' + interval '1 second' * g END,
  CASE WHEN g % 11 = 0 THEN NULL ELSE ts - interval '1 hour' * (g % 48) END
FROM (
  SELECT g,
         timestamptz '2026-09-02 00:00:00+00' + interval '1 microsecond' *
           LEAST(604800000000 - 1,
                 div((g - 1)::numeric * 604800000000, :rows)::bigint + (g * 7919) % 1000000) AS ts
  FROM generate_series(1::bigint, :rows::bigint) AS g
) AS s;
\else
CREATE TABLE dpone_bench.:"table" (
  id      bigint      NOT NULL,
  ts      timestamptz NOT NULL,
  n       int         NOT NULL,
  label   text        NOT NULL,
  payload text        NOT NULL
);
INSERT INTO dpone_bench.:"table"
SELECT
  g,
  timestamptz '2026-09-02 00:00:00+00' + interval '1 microsecond' *
    LEAST(604800000000 - 1,
          div((g - 1)::numeric * 604800000000, :rows)::bigint + (g * 7919) % 1000000),
  (g % 100000)::int,
  'row-' || g,
  CASE WHEN g = :rows / 2 + 1
       THEN (SELECT string_agg(md5(i::text), '' ORDER BY i) FROM generate_series(1, 327680) AS i)
       ELSE left(repeat(md5(g::text), 5), (g % 161)::int)
  END
FROM generate_series(1::bigint, :rows::bigint) AS g;
\endif

\if :with_index
CREATE INDEX ON dpone_bench.:"table" (ts);
\endif
VACUUM ANALYZE dpone_bench.:"table";
COMMENT ON TABLE dpone_bench.:"table" IS :'marker';

//! Server-side fingerprints: what ties the rows a PostgreSQL publication
//! inserts, and the target rows it keeps, to what was verified.
//!
//! A fingerprint is a row count and the exact (`numeric`) sum of a 64-bit
//! hash of each row ([`row_hash_sql`]): each value hashed by its type's own
//! hash function through `hash_record_extended` (PostgreSQL 14 and later),
//! the row's combined hash mixed once more by `hashint8extended`. That
//! costs less than half of hashing each row's text (v1 of this format,
//! `hashtextextended(ROW(...)::text, 0)`: every timestamp and number
//! formatted; 0.51-0.55 s against 1.27-1.55 s on 2M narrow rows), at the
//! same strength:
//!
//! - the final mix matters: `hash_record_extended` combines its columns'
//!   hashes linearly (`h = 31 * h + column hash`), so a plain sum of it
//!   over rows would be a sum of per-column sums, blind to two rows
//!   exchanging a value;
//! - a type's hash agrees with its equality, which for dpone's target types
//!   is identity, except for `real` / `double precision` (`-0` equals `0`,
//!   NaNs are equal), hashed by their exact bits (`float4send` /
//!   `float8send`), and text under a nondeterministic collation, hashed
//!   under `COLLATE "C"` (bytes); a `numeric(p,s)` column's scale is fixed.
//!
//! Like the digest it ignores order and keeps multiplicity; unlike it, the
//! server computes it in one scan and no row leaves the server. Summed
//! 64-bit hashes are weaker evidence than the SHA-256 digest: enough to see
//! an accidental or concurrent change, not a forgery. [`SESSION`] fixes the
//! session settings every fingerprint is computed under.
//!
//! Fingerprints are recorded as comments on dpone's own relations, so they
//! live and go with them:
//!
//! - a staging table's, when `inspect` verifies it, in the same snapshot as
//!   the digest read back (the rows the digest verified);
//! - a generation's, when it is built: the sum of its staging tables'
//!   recorded fingerprints (not a new scan: what was verified, not what the
//!   tables hold now) and, for a window, the fingerprint of the target's
//!   rows outside it at that moment (the kept rows).
//!
//! The publishing transaction recomputes both under its locks and refuses
//! to commit unless they are equal (`sink/transaction.rs`: the generation's
//! rows by a `SELECT` in the snapshot its `INSERT` reads, or, when the
//! target has triggers or rules, the rows the `INSERT` returns).

use crate::error::classify;
use crate::source::quote_ident;
use dpone_core::Diagnostic;
use dpone_core::ports::{AdapterError, Contents, Result};
use dpone_core::types::{Column, DType};
use std::collections::BTreeMap;
use tokio_postgres::GenericClient;

/// Session settings every fingerprint is computed under. The type hashes
/// do not depend on them, but a window's bounds, written as text literals
/// in the filter, are read under `TimeZone`: fixed, so that nothing a
/// fingerprint compares depends on the session.
pub(super) const SESSION: &str = "SET TimeZone = 'UTC'; SET DateStyle = 'ISO, YMD'; SET IntervalStyle = 'postgres'; \
     SET extra_float_digits = 1; SET bytea_output = 'hex'";

/// What a comment starts with when dpone recorded a fingerprint in it.
/// A v1 comment (text hashes, written before the type hashes) is not read:
/// a run verified by an older dpone is refused and rerun, never compared
/// across the two formats.
const TAG: &str = "dpone fingerprint v2:";

/// Row count and sum of row hashes of a multiset of rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Fingerprint {
    pub rows: u64,
    pub sum: i128,
}

impl Fingerprint {
    /// A `Verification` error `code` (with `hint`) unless `self` is
    /// `expected`; `message` words it from both.
    pub(crate) fn check_is(
        self,
        expected: Fingerprint,
        code: &str,
        message: impl FnOnce(Fingerprint, Fingerprint) -> String,
        hint: &str,
    ) -> Result<()> {
        if self == expected {
            return Ok(());
        }
        Err(AdapterError::verification(code, message(self, expected)).hint(hint))
    }
}

impl std::fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} rows, hash sum {}", self.rows, self.sum)
    }
}

impl Fingerprint {
    /// Multiset union (None on an overflow no real table reaches).
    fn plus(self, other: Fingerprint) -> Option<Fingerprint> {
        Some(Fingerprint { rows: self.rows.checked_add(other.rows)?, sum: self.sum.checked_add(other.sum)? })
    }

    /// A lower bound of the number of row groups whose multiplicity differs
    /// between the two multisets (0 exactly when the fingerprints are equal):
    /// a count difference of n is at least n groups; equal counts with other
    /// sums mean at least one row was replaced by another (two groups).
    pub(crate) fn differing_groups(&self, other: &Fingerprint) -> u64 {
        match (self == other, self.rows.abs_diff(other.rows)) {
            (true, _) => 0,
            (false, 0) => 2,
            (false, n) => n,
        }
    }
}

/// The SQL of one row's 64-bit hash over `columns` (see the module docs).
pub(super) fn row_hash_sql(columns: &[Column]) -> String {
    let values: Vec<String> = columns
        .iter()
        .map(|c| {
            let name = quote_ident(&c.name);
            match c.ty.dtype {
                DType::Float32 => format!("float4send({name})"),
                DType::Float64 => format!("float8send({name})"),
                DType::String => format!("{name} COLLATE \"C\""),
                _ => name,
            }
        })
        .collect();
    format!("hashint8extended(hash_record_extended(ROW({}), 0), 0)", values.join(", "))
}

/// The first `server_version_num` with `hash_record_extended`.
const MIN_SERVER_VERSION: i32 = 140000;

/// The refusal of a target server too old for [`row_hash_sql`], found
/// before anything is written.
pub(super) fn version_refusal(server_version_num: i32) -> Option<Diagnostic> {
    (server_version_num < MIN_SERVER_VERSION).then(|| {
        Diagnostic::new(
            "unsupported_server_version",
            "sink.connection",
            format!(
                "the target server is PostgreSQL {}.{}; dpone's verification of what a PostgreSQL target holds needs 14 or later",
                server_version_num / 10000,
                server_version_num % 10000 / 100
            ),
        )
        .hint("upgrade the target server (PostgreSQL 13 and older are out of support), or load into another target")
    })
}

/// [`version_refusal`] of the server `client` is connected to.
pub(super) async fn check_server_version(client: &impl GenericClient) -> Result<Option<Diagnostic>> {
    let row = client
        .query_one("SELECT current_setting('server_version_num')::int4", &[])
        .await
        .map_err(|e| classify("reading the target server's version", e))?;
    Ok(version_refusal(row.get(0)))
}

/// `SELECT count, sum` of the fingerprint of `columns` over `from` (a
/// relation, or a CTE name), restricted by `filter` (SQL).
pub(super) fn select_sql(columns: &[Column], from: &str, filter: Option<&str>) -> String {
    let filter = filter.map(|f| format!(" WHERE {f}")).unwrap_or_default();
    format!("SELECT count(*)::int8, coalesce(sum({}), 0)::text FROM {from}{filter}", row_hash_sql(columns))
}

/// Runs a query built by [`select_sql`] (or ending in the same two columns).
pub(super) async fn query(client: &impl GenericClient, sql: &str, what: &str) -> Result<Fingerprint> {
    let row = client.query_one(sql, &[]).await.map_err(|e| classify(what, e))?;
    let (rows, sum): (i64, String) = (row.get(0), row.get(1));
    let sum = sum.parse().map_err(|_| AdapterError::internal(format!("{what}: the hash sum `{sum}` is not an integer")))?;
    Ok(Fingerprint { rows: rows as u64, sum })
}

/// The fingerprints recorded on a relation, by name (`window`, `kept`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Recorded(BTreeMap<String, Fingerprint>);

impl Recorded {
    pub(crate) fn get(&self, name: &str) -> Option<Fingerprint> {
        self.0.get(name).copied()
    }

    pub(crate) fn with(mut self, name: &str, fp: Fingerprint) -> Self {
        self.0.insert(name.to_string(), fp);
        self
    }

    /// The comment text: `dpone fingerprint v2: window=12:-345 kept=3:77`.
    pub(crate) fn to_comment(&self) -> String {
        let parts: Vec<String> = self.0.iter().map(|(k, f)| format!("{k}={}:{}", f.rows, f.sum)).collect();
        format!("{TAG} {}", parts.join(" "))
    }

    /// Parses a comment written by [`Recorded::to_comment`]; None for any other text.
    pub(crate) fn parse(comment: &str) -> Option<Recorded> {
        let body = comment.strip_prefix(TAG)?;
        let mut out = BTreeMap::new();
        for part in body.split_whitespace() {
            let (name, value) = part.split_once('=')?;
            let (rows, sum) = value.split_once(':')?;
            out.insert(name.to_string(), Fingerprint { rows: rows.parse().ok()?, sum: sum.parse().ok()? });
        }
        Some(Recorded(out))
    }
}

/// The fingerprints recorded on `relation` (quoted, qualified), if any.
pub(super) async fn recorded(client: &impl GenericClient, relation: &str) -> Result<Option<Recorded>> {
    let comment: Option<String> = client
        .query_one("SELECT obj_description(to_regclass($1), 'pg_class')", &[&relation])
        .await
        .map_err(|e| classify("reading a recorded fingerprint", e))?
        .get(0);
    Ok(comment.as_deref().and_then(Recorded::parse))
}

/// Records `fps` on `relation` (a table or a view, quoted and qualified).
pub(super) async fn record(client: &impl GenericClient, relation: &str, kind: &str, fps: &Recorded) -> Result<()> {
    let sql = format!("COMMENT ON {kind} {relation} IS {}", crate::source::quote_literal(&fps.to_comment()));
    client.batch_execute(&sql).await.map_err(|e| classify("recording a fingerprint", e))
}

/// The sum of the `window` fingerprints recorded on `stagings` (quoted,
/// qualified) when they were verified; an error names one without.
pub(super) async fn sum_of_verified(client: &impl GenericClient, stagings: &[String]) -> Result<Fingerprint> {
    let mut total = Fingerprint::default();
    for s in stagings {
        let fp = recorded(client, s).await?.and_then(|r| r.get("window")).ok_or_else(|| {
            AdapterError::verification(
                "generation_verification_failed",
                format!("staging table {s} carries no fingerprint of its verification"),
            )
            .hint("a staging table is verified (inspected) before a generation uses it; abandon the run and rerun")
        })?;
        total = total.plus(fp).ok_or_else(|| AdapterError::internal("fingerprint sum overflow"))?;
    }
    Ok(total)
}

impl super::PostgresTarget {
    /// Verifies a staging table: its digest read back by binary COPY and
    /// its fingerprint, in one snapshot (shared by two connections, so that
    /// both run at once); the fingerprint is recorded on it.
    pub(super) async fn inspect_staging(&self, name: &str) -> Result<Contents> {
        let table = self.owned_sql(name);
        let client = self.connect().await?;
        let begin = format!("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; {SESSION}");
        client.batch_execute(&begin).await.map_err(|e| classify("verifying a staging table", e))?;
        // The fingerprint is computed on a second connection in the same
        // snapshot (exported by the first), at the same time as the read-back.
        let snapshot: String =
            client.query_one("SELECT pg_export_snapshot()", &[]).await.map_err(|e| classify("verifying a staging table", e))?.get(0);
        let second = self.connect().await?;
        let join = format!(
            "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET TRANSACTION SNAPSHOT {}; {SESSION}",
            crate::source::quote_literal(&snapshot)
        );
        second.batch_execute(&join).await.map_err(|e| classify("verifying a staging table", e))?;
        let fp_sql = select_sql(self.columns()?, &table, None);
        let (fp, contents) =
            tokio::try_join!(query(&second, &fp_sql, "fingerprinting a staging table"), self.read_back(&client, &table, None))?;
        second.batch_execute("COMMIT").await.map_err(|e| classify("verifying a staging table", e))?;
        client.batch_execute("COMMIT").await.map_err(|e| classify("verifying a staging table", e))?;
        if fp.rows != contents.rows {
            return Err(AdapterError::internal(format!("one snapshot of {table} counted {} and {} rows", fp.rows, contents.rows)));
        }
        // Recorded after the snapshot: a change made since is what the
        // publishing transaction will see, and refuse.
        record(&client, &table, "TABLE", &Recorded::default().with("window", fp)).await?;
        Ok(contents)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_round_trip_and_other_text_is_not_a_record() {
        let r = Recorded::default()
            .with("window", Fingerprint { rows: 12, sum: -345 })
            .with("kept", Fingerprint { rows: 0, sum: i128::from(i64::MAX) * 3 });
        assert_eq!(Recorded::parse(&r.to_comment()), Some(r));
        assert_eq!(Recorded::parse("dpone backup of x"), None);
        assert_eq!(Recorded::parse("dpone fingerprint v2: window=1"), None);
        assert_eq!(Recorded::parse("dpone fingerprint v1: window=12:-345"), None, "text hashes are never compared with v2's");
    }

    #[test]
    fn servers_before_14_are_refused_at_the_connection() {
        let d = version_refusal(130014).expect("13 is refused");
        assert_eq!((d.code.as_str(), d.path.as_str()), ("unsupported_server_version", "sink.connection"));
        assert!(d.message.contains("PostgreSQL 13.0"), "{}", d.message);
        assert!(version_refusal(140000).is_none());
        assert!(version_refusal(150020).is_none());
    }

    /// A nullable column of `dtype`.
    fn col(name: &str, dtype: DType) -> Column {
        Column { name: name.into(), ty: dpone_core::types::ColumnType::new(dtype, true), native_type: String::new() }
    }

    #[test]
    fn row_hash_mixes_the_record_hash_and_hashes_floats_by_bits_and_text_by_bytes() {
        let cols = [
            col("id", DType::Int64),
            col("f", DType::Float32),
            col("d", DType::Float64),
            col("Name", DType::String),
            col("amount", DType::Decimal { precision: 18, scale: 4 }),
        ];
        assert_eq!(
            row_hash_sql(&cols),
            r#"hashint8extended(hash_record_extended(ROW("id", float4send("f"), float8send("d"), "Name" COLLATE "C", "amount"), 0), 0)"#
        );
    }

    #[test]
    fn differing_groups_is_a_lower_bound_and_zero_only_for_equal_fingerprints() {
        let a = Fingerprint { rows: 5, sum: 10 };
        assert_eq!(a.differing_groups(&a), 0);
        assert_eq!(a.differing_groups(&Fingerprint { rows: 5, sum: 11 }), 2, "a replaced row: its old and new groups");
        assert_eq!(a.differing_groups(&Fingerprint { rows: 6, sum: 17 }), 1, "one more row");
        assert_eq!(a.differing_groups(&Fingerprint { rows: 2, sum: 10 }), 3);
    }

    /// The row hash on the real server: the changes a linear or an
    /// equality-based hash would miss each change the fingerprint (and the
    /// unmixed record hash is shown linear, so the mix is needed).
    #[tokio::test]
    async fn the_row_hash_sees_exchanged_values_signed_zeros_and_case_under_a_nondeterministic_collation() {
        let url = dpone_testkit::postgres_url();
        let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.expect("the PostgreSQL test server");
        tokio::spawn(connection);
        let schema = dpone_testkit::unique_name("fp_row_hash");
        client
            .batch_execute(&format!(
                "CREATE SCHEMA {schema}; \
                 CREATE COLLATION {schema}.ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false); \
                 CREATE TABLE {schema}.t (id int8, name text COLLATE {schema}.ci, f float8, r real, amount numeric(18,4)); \
                 INSERT INTO {schema}.t VALUES (1, 'a', 0.5, 0, 1.5), (2, 'b', 0, 2.5, 2.25)"
            ))
            .await
            .expect("fixture");
        let cols = [
            col("id", DType::Int64),
            col("name", DType::String),
            col("f", DType::Float64),
            col("r", DType::Float32),
            col("amount", DType::Decimal { precision: 18, scale: 4 }),
        ];
        let table = format!("{schema}.t");
        let fp = |sql: String| {
            let client = &client;
            async move { query(client, &sql, "test").await.expect("fingerprint") }
        };
        let unmixed =
            format!("SELECT count(*)::int8, coalesce(sum(hash_record_extended(ROW(id, name, f, r, amount), 0)), 0)::text FROM {table}");
        let before = fp(select_sql(&cols, &table, None)).await;
        let before_unmixed = fp(unmixed.clone()).await;
        for (what, change, undo) in [
            (
                "two rows exchanging their names",
                "UPDATE {t} SET name = CASE id WHEN 1 THEN 'b' ELSE 'a' END",
                "UPDATE {t} SET name = CASE id WHEN 1 THEN 'a' ELSE 'b' END",
            ),
            ("a double 0 becoming -0", "UPDATE {t} SET f = '-0' WHERE id = 2", "UPDATE {t} SET f = 0 WHERE id = 2"),
            ("a real 0 becoming -0", "UPDATE {t} SET r = '-0' WHERE id = 1", "UPDATE {t} SET r = 0 WHERE id = 1"),
            (
                "a text changing case under a case-insensitive collation",
                "UPDATE {t} SET name = 'A' WHERE id = 1",
                "UPDATE {t} SET name = 'a' WHERE id = 1",
            ),
        ] {
            client.batch_execute(&change.replace("{t}", &table)).await.expect("change");
            let after = fp(select_sql(&cols, &table, None)).await;
            assert_ne!(after, before, "{what}: the fingerprint changes");
            if what.starts_with("two rows") {
                // Each row's unmixed hash is linear in its values' hashes
                // (mod 2^64): the sums can differ only by the rows' wraps,
                // a multiple of 2^64, which most exchanges do not change.
                let diff = fp(unmixed.clone()).await.sum - before_unmixed.sum;
                assert_eq!(diff.rem_euclid(1 << 64), 0, "unmixed record hashes are blind to {what} but for wraps");
            }
            client.batch_execute(&undo.replace("{t}", &table)).await.expect("undo");
            assert_eq!(fp(select_sql(&cols, &table, None)).await, before, "{what} undone");
        }
        client.batch_execute(&format!("DROP SCHEMA {schema} CASCADE")).await.expect("cleanup");
    }
}

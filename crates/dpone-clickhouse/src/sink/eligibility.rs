//! ClickHouse target eligibility: every reason a target cannot take a run,
//! checked read-only before any write (server version, Atomic database,
//! plain MergeTree, no TTL, projections, dependent views, computed columns,
//! pending mutations or row policies, and the window column's type).
//!
//! Each reason is a refusal with a stable code, the manifest path and a
//! hint; the checks that make the rest meaningless (an old server, a
//! missing database or table) end the list early.

use super::{ClickhouseTarget, MIN_MAJOR_VERSION, text};
use crate::client::{named, quote_str, table_is};
use dpone_core::Diagnostic;
use dpone_core::ports::{EligibilityRequest, Result};
use dpone_core::types::DType;
use serde_json::Value as Json;

/// An re2 pattern matching a reference to `database.table` in a query,
/// quoted or not, and nothing longer (`db.t` must not match `db.t_archive`).
fn table_reference_pattern(database: &str, table: &str) -> String {
    let esc = |s: &str| {
        // re2 accepts a backslash only before ASCII punctuation.
        s.chars().map(|c| if c.is_ascii_punctuation() { format!("\\{c}") } else { c.to_string() }).collect::<String>()
    };
    let ident = |s: &str| format!("(?:`{0}`|\"{0}\"|{0})", esc(s));
    format!("(?:^|[^A-Za-z0-9_`\"]){}\\s*\\.\\s*{}(?:$|[^A-Za-z0-9_`\"])", ident(database), ident(table))
}

fn major_version(version: &str) -> Option<u32> {
    version.split('.').next()?.parse().ok()
}

impl ClickhouseTarget {
    /// Every reason the target cannot take a run, as refusals (empty = eligible).
    pub(super) async fn refusals(&self, request: &EligibilityRequest) -> Result<Vec<Diagnostic>> {
        let mut out = Vec::new();
        let refuse = |code: &str, path: &str, msg: String, hint: &str| Diagnostic::new(code, path, msg).hint(hint);
        let version = self.client.version().await?;
        if let Some(d) = crate::digest_refusal(&self.client, self.digest, "the target", &version).await? {
            out.push(d);
        }
        if major_version(&version).is_none_or(|m| m < MIN_MAJOR_VERSION) {
            out.push(refuse(
                "target_server_unsupported",
                "sink.connection",
                format!("ClickHouse {version} has no Atomic databases and no EXCHANGE TABLES, so a window cannot be published atomically"),
                "use ClickHouse 21.8 or newer with an Atomic database",
            ));
            return Ok(out);
        }
        let db = self.client.query_rows(&format!("SELECT engine FROM system.databases WHERE name = {}", quote_str(&self.database))).await?;
        match db.first().map(|r| text(r, "engine")) {
            None => {
                out.push(refuse(
                    "target_missing",
                    "sink.table.schema",
                    format!("database `{}` does not exist", self.database),
                    "create the database (ENGINE = Atomic) and the target table first",
                ));
                return Ok(out);
            }
            Some(engine) if engine != "Atomic" => out.push(refuse(
                "target_database_not_atomic",
                "sink.table.schema",
                format!("database `{}` uses engine {engine}; EXCHANGE TABLES needs an Atomic database", self.database),
                "move the table to a database created with ENGINE = Atomic",
            )),
            Some(_) => {}
        }
        if self.staging_database != self.database {
            let sdb = self
                .client
                .query_rows(&format!("SELECT engine FROM system.databases WHERE name = {}", quote_str(&self.staging_database)))
                .await?;
            if sdb.is_empty() {
                out.push(refuse(
                    "staging_database_missing",
                    "sink.staging.schema",
                    format!("staging database `{}` does not exist", self.staging_database),
                    "create it or remove sink.staging.schema",
                ));
            }
        }
        let tables = self
            .client
            .query_rows(&format!(
                "SELECT engine, create_table_query, dependencies_database, dependencies_table FROM system.tables WHERE {}",
                named(&self.database, &self.table)
            ))
            .await?;
        let Some(t) = tables.first() else {
            out.push(refuse(
                "target_missing",
                "sink.table",
                format!("target table {} does not exist", self.target_sql()),
                "create the target table first; dpone replaces data, it does not invent schemas",
            ));
            return Ok(out);
        };
        let engine = text(t, "engine");
        if engine != "MergeTree" {
            out.push(refuse(
                "target_engine_unsupported",
                "sink.table",
                format!("target engine is {engine}; only plain MergeTree is admitted for window publication"),
                "replicated, replacing, collapsing and distributed engines need separate proof of atomicity",
            ));
        }
        let create = text(t, "create_table_query");
        if create.contains(" TTL ") {
            out.push(refuse(
                "target_has_ttl",
                "sink.table",
                "the target table has a TTL".into(),
                "remove the TTL: it could delete published rows",
            ));
        }
        if create.contains("PROJECTION ") {
            out.push(refuse(
                "target_has_projections",
                "sink.table",
                "the target table has projections".into(),
                "drop the projections; they are not verified by dpone",
            ));
        }
        let deps = t.get("dependencies_table").and_then(Json::as_array).map(Vec::len).unwrap_or(0);
        let views = self
            .client
            .query_rows(&format!(
                "SELECT database, name FROM system.tables WHERE engine IN ('View', 'MaterializedView', 'LiveView', 'WindowView') \
                 AND match(create_table_query, {})",
                quote_str(&table_reference_pattern(&self.database, &self.table))
            ))
            .await?;
        if deps > 0 || !views.is_empty() {
            let names: Vec<String> = views.iter().map(|v| format!("{}.{}", text(v, "database"), text(v, "name"))).collect();
            out.push(refuse(
                "target_has_dependent_views",
                "sink.table",
                format!("views depend on the target ({})", if names.is_empty() { "materialized views".into() } else { names.join(", ") }),
                "EXCHANGE would leave dependent views pointing at the swapped table; drop or detach them first",
            ));
        }
        let computed = self
            .client
            .query_rows(&format!(
                "SELECT name, default_kind FROM system.columns WHERE {} AND default_kind != ''",
                table_is(&self.database, &self.table)
            ))
            .await?;
        for c in &computed {
            out.push(refuse(
                "target_computed_columns",
                "sink.table",
                format!("target column `{}` is {}", text(c, "name"), text(c, "default_kind")),
                "DEFAULT, MATERIALIZED, ALIAS and EPHEMERAL columns are not admitted: every column must come from the source",
            ));
        }
        // Work the server has not finished on the target, and rules that hide its rows.
        let pending = [
            (
                "system.mutations",
                " AND NOT is_done",
                "target_mutations_pending",
                "mutations of the target are not finished",
                "wait for them (system.mutations) or kill them before running",
            ),
            (
                "system.row_policies",
                "",
                "target_row_policies",
                "row policies apply to the target",
                "row policies hide rows from verification; remove them or run as a user they do not restrict",
            ),
        ];
        for (from, more, code, what, hint) in pending {
            let n =
                self.client.scalar(&format!("SELECT count() FROM {from} WHERE {}{more}", table_is(&self.database, &self.table))).await?;
            if n != "0" {
                out.push(refuse(code, "sink.table", format!("{n} {what}"), hint));
            }
        }
        if let Some(col) = &request.window_column
            && let Some(c) = self.columns()?.iter().find(|c| &c.name == col)
            && !matches!(&c.ty.dtype, DType::DateTime64 { precision: 0..=6, tz: Some(tz) } if tz == "UTC")
        {
            out.push(refuse(
                "window_column_type",
                "sink.strategy.window.column",
                format!("target window column `{col}` is {}; (Nullable)DateTime64(p <= 6, 'UTC') is required", c.ty),
                "declare the column DateTime64(6, 'UTC')",
            ));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::table_reference_pattern;

    #[test]
    fn table_reference_patterns_escape_only_ascii_punctuation() {
        // re2 refuses a backslash before a non-ASCII letter ("invalid escape sequence").
        let p = table_reference_pattern("d_b", "таблица-1");
        assert!(p.contains(r"таблица\-1") && p.contains(r"d\_b"), "{p}");
        assert!(!p.contains(r"\т"), "{p}");
    }
}

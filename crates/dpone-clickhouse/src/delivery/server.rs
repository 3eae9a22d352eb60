//! The queries behind a chunk's fingerprint: the table's engine and facts,
//! the scan of the window column per part, the active parts.
//!
//! Only `*MergeTree` tables have parts whose files identify their rows;
//! any other engine is refused (`fingerprint_unsupported`) before anything
//! else is read, and every chunk is transferred. A fact the server does
//! not give (a system table this user may not read, a server that lacks
//! it) is never left out of the identity: the fingerprint fails
//! (`fingerprint_incomplete`, permanent; the engine then transfers every
//! chunk), since a digest without it could equal a later one while the
//! fact changed. The one exception is `system.masking_policies`, absent
//! from servers that have no masking policies at all: its absence is
//! recorded as such, a fact that holds until the server is upgraded.

use super::{ActivePart, ColumnFact, PartRange, TableFacts, fingerprints};
use crate::client::{ChClient, Idempotence, named, quote_ident, quote_str, table_is};
use dpone_core::delivery::ChunkFingerprints;
use dpone_core::ports::{AdapterError, ErrorClass, Result};
use dpone_core::window::Chunk;
use futures_util::TryFutureExt;
use futures_util::future::{try_join, try_join5};
use serde_json::{Map, Value};

type Row = Map<String, Value>;

/// The settings of a session that change what a plain `SELECT` of the
/// table's columns returns (checked in `system.settings` on 26.9; a name
/// an older server does not know is simply absent, as its effect is).
const READ_SETTINGS: &[&str] = &[
    "additional_table_filters",
    "additional_result_filter",
    "apply_deleted_mask",
    "apply_mutations_on_fly",
    "apply_patch_parts",
    "final",
    "session_timezone",
];

/// Reads the fingerprints of `chunks` of `database.table` on `client`;
/// `legacy`: the digest of `clickhouse.parts.v2` (a test switch, see
/// [`fingerprints`]).
pub async fn read(
    client: &ChClient,
    database: &str,
    table: &str,
    window_column: &str,
    chunks: &[Chunk],
    legacy: bool,
) -> Result<ChunkFingerprints> {
    let tables = client
        .query_rows(&format!(
            "SELECT engine, toString(uuid) AS uuid, create_table_query AS q, toString(metadata_modification_time) AS mtime, \
             (SELECT toString(count()) FROM system.tables WHERE database = 'system' AND name = 'masking_policies') AS masking \
             FROM system.tables WHERE {}",
            named(database, table)
        ))
        .await?;
    let Some(t) = tables.first() else {
        return Err(AdapterError::permanent(
            "source_table_missing",
            format!("source table {}.{} does not exist", quote_ident(database), quote_ident(table)),
        ));
    };
    let engine = text(t, "engine");
    if let Some(why) = without_parts(&engine) {
        return Err(AdapterError::unsupported(
            "fingerprint_unsupported",
            format!(
                "the chunks of {}.{} have no fingerprint: it is a {engine} table, and {why}; only *MergeTree tables have \
                 parts whose files identify their rows, so every chunk is transferred",
                quote_ident(database),
                quote_ident(table)
            ),
        ));
    }
    let facts = TableFacts { uuid: text(t, "uuid"), ..TableFacts::default() };
    // The facts and the scan are read at once. A change between them (or
    // during either) gives a digest that mixes two states, which no later
    // reading of one state equals unless the change is undone exactly.
    let (facts, scan) = if legacy {
        (facts, scan(client, database, table, window_column).await?)
    } else {
        let facts = TableFacts { create_query: text(t, "q"), metadata_time: text(t, "mtime"), ..facts };
        let masking = text(t, "masking") != "0";
        try_join(read_facts(client, database, table, masking, facts), scan(client, database, table, window_column)).await?
    };
    let active = client
        .query_rows(&format!(
            "SELECT name, partition_id, toString(rows) AS rows, toString(hash_of_all_files) AS h FROM system.parts WHERE {} AND active",
            table_is(database, table)
        ))
        .await?
        .iter()
        .map(|r| {
            Ok(ActivePart {
                name: text(r, "name"),
                partition_id: text(r, "partition_id"),
                rows: number(r, "rows")? as u64,
                hash: text(r, "h"),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    fingerprints(&facts, &scan, &active, chunks, legacy)
}

/// Why a table of `engine` has no parts to fingerprint (None: a
/// `*MergeTree`, Replicated and Shared ones included).
fn without_parts(engine: &str) -> Option<&'static str> {
    if engine.ends_with("MergeTree") {
        return None;
    }
    Some(match engine {
        "View" => "a View has no parts of its own: each read runs its query over other tables",
        "MaterializedView" => "a MaterializedView keeps its rows in another table (its TO table or its inner table)",
        "Merge" => "a Merge table has no parts of its own: it reads the tables whose names match its pattern",
        "Distributed" => "a Distributed table has no parts of its own: it reads the tables of its cluster's shards",
        "Buffer" => "a Buffer table holds rows in memory until they are flushed to another table",
        "Dictionary" => "a Dictionary table reads a dictionary, which loads its rows from its source",
        "Memory" | "Set" | "Join" | "KeeperMap" => "it keeps its rows without parts whose files could identify them",
        "Log" | "TinyLog" | "StripeLog" => "it appends its rows to files instead of writing parts",
        _ => "its rows are not kept in MergeTree parts",
    })
}

/// The identity's facts beyond the `system.tables` row (see the module
/// doc), read at once: each is a small query, and `system.functions`
/// alone takes ~40 ms on 26.9 (it lists every function).
async fn read_facts(client: &ChClient, database: &str, table: &str, masking: bool, facts: TableFacts) -> Result<TableFacts> {
    let (columns, pending_mutations, (row_policies, masking_policies), functions, read_settings) = try_join5(
        columns(client, database, table),
        pending_mutations(client, database, table),
        policies(client, database, table, masking),
        client
            .query_rows("SELECT name, origin, create_query FROM system.functions WHERE origin != 'System' ORDER BY name")
            .map_err(|e| incomplete(database, table, "user-defined functions", e)),
        read_settings(client, database, table),
    )
    .await?;
    // What the table's reads may call: its definition (DEFAULT, ALIAS,
    // MATERIALIZED, TTL), its policies, and the functions those call.
    let mut texts: Vec<String> =
        [&facts.create_query].into_iter().chain(&row_policies).chain(masking_policies.iter().flatten()).cloned().collect();
    let functions = called(&mut texts, functions);
    let dictionaries = dictionaries(client, database, table, &texts).await?;
    Ok(TableFacts { columns, pending_mutations, row_policies, masking_policies, functions, dictionaries, read_settings, ..facts })
}

/// The user-defined functions whose names appear in `texts`, directly or
/// through the definitions of others (a function is only ever called by
/// its name written out, so one whose name no text holds cannot change a
/// read; a name found inside another word only takes one too many);
/// their definitions are added to `texts`.
fn called(texts: &mut Vec<String>, functions: Vec<Row>) -> Vec<String> {
    let mut left = functions;
    let mut taken = Vec::new();
    loop {
        let (found, rest): (Vec<Row>, Vec<Row>) = left.into_iter().partition(|f| {
            let name = text(f, "name");
            !name.is_empty() && texts.iter().any(|t| t.contains(&name))
        });
        if found.is_empty() {
            break;
        }
        texts.extend(found.iter().map(|f| text(f, "create_query")));
        taken.extend(found);
        left = rest;
    }
    taken.sort_by_key(|f| text(f, "name"));
    lines(taken)
}

async fn columns(client: &ChClient, database: &str, table: &str) -> Result<Vec<ColumnFact>> {
    client
        .query_rows(&format!(
            "SELECT name, toString(position) AS position, type, default_kind, default_expression FROM system.columns \
             WHERE {} ORDER BY position",
            table_is(database, table)
        ))
        .await
        .map_err(|e| incomplete(database, table, "columns", e))?
        .iter()
        .map(|r| {
            Ok(ColumnFact {
                name: text(r, "name"),
                position: number(r, "position")? as u64,
                type_name: text(r, "type"),
                default_kind: text(r, "default_kind"),
                default_expression: text(r, "default_expression"),
            })
        })
        .collect()
}

async fn pending_mutations(client: &ChClient, database: &str, table: &str) -> Result<Vec<(String, String)>> {
    let rows = client
        .query_rows(&format!(
            "SELECT mutation_id, command FROM system.mutations WHERE {} AND is_done = 0 ORDER BY mutation_id",
            table_is(database, table)
        ))
        .await
        .map_err(|e| incomplete(database, table, "pending mutations", e))?;
    Ok(rows.iter().map(|r| (text(r, "mutation_id"), text(r, "command"))).collect())
}

/// The row policies and, where the server has them (`masking`), the
/// masking policies that may name the table. A policy of `db.*` or of
/// every database may be stored with an empty or `*` database or table:
/// those are taken too. Their ids are kept: a policy dropped and created
/// again gets another.
async fn policies(client: &ChClient, database: &str, table: &str, masking: bool) -> Result<(Vec<String>, Option<Vec<String>>)> {
    let naming = format!("database IN ({}, '', '*') AND table IN ({}, '', '*')", quote_str(database), quote_str(table));
    let rows = client
        .query_rows(&format!(
            "SELECT name, toString(id) AS id, database, table, select_filter, is_restrictive, apply_to_all, apply_to_list, \
             apply_to_except FROM system.row_policies WHERE {naming} ORDER BY name"
        ))
        .await
        .map_err(|e| incomplete(database, table, "row policies", e))?;
    if !masking {
        return Ok((lines(rows), None));
    }
    let masks = client
        .query_rows(&format!(
            "SELECT name, toString(id) AS id, database, table, update_assignments, where_condition, priority, apply_to_all, \
             apply_to_list, apply_to_except FROM system.masking_policies WHERE {naming} ORDER BY name"
        ))
        .await
        .map_err(|e| incomplete(database, table, "masking policies", e))?;
    Ok((lines(rows), Some(lines(masks))))
}

/// [`READ_SETTINGS`] as this session has them, the time zone and the
/// server's version (an upgrade may change what an expression returns).
async fn read_settings(client: &ChClient, database: &str, table: &str) -> Result<Vec<(String, String)>> {
    let list = READ_SETTINGS.iter().map(|s| quote_str(s)).collect::<Vec<_>>().join(", ");
    let rows = client
        .query_rows(&format!(
            "SELECT name, value FROM system.settings WHERE name IN ({list}) \
             UNION ALL SELECT 'timezone()' AS name, timezone() AS value UNION ALL SELECT 'version()' AS name, version() AS value"
        ))
        .await
        .map_err(|e| incomplete(database, table, "read settings", e))?;
    let mut settings: Vec<(String, String)> = rows.iter().map(|r| (text(r, "name"), text(r, "value"))).collect();
    settings.sort();
    Ok(settings)
}

/// The dictionaries `texts` (the table's definition, its policies, the
/// functions they call) may
/// call, each with the digest of its contents: a reload changes what a
/// read returns without touching the table, and `system.dictionaries`
/// dates loads in whole seconds only. A dictionary matters when its name
/// appears in a text (more dictionaries than needed cost transfers, never
/// a missed change). A `direct` or `cache` layout reads its source at
/// each call: nothing dates its values, so the table has no fingerprint.
async fn dictionaries(client: &ChClient, database: &str, table: &str, texts: &[String]) -> Result<Vec<String>> {
    let failed = |e| incomplete(database, table, "dictionaries", e);
    let names = client.query_rows("SELECT database, name FROM system.dictionaries ORDER BY database, name").await.map_err(failed)?;
    let mut out = Vec::new();
    for row in names {
        let name = text(&row, "name");
        if name.is_empty() || !texts.iter().any(|t| t.contains(&name)) {
            continue;
        }
        let (db, full) = (text(&row, "database"), quote_str(&format!("{}.{name}", text(&row, "database"))));
        // A dictionary not loaded yet has no layout in its row: a query
        // that reads nothing loads it (a read of the table would too).
        client.query_text(&format!("SELECT 1 FROM dictionary({full}) LIMIT 0"), Idempotence::Safe).await.map_err(failed)?;
        let state = client
            .query_rows(&format!(
                "SELECT database, name, toString(uuid) AS uuid, toString(status) AS status, type, source FROM system.dictionaries \
                 WHERE database = {} AND name = {}",
                quote_str(&db),
                quote_str(&name)
            ))
            .await
            .map_err(failed)?;
        let layout = state.first().map(|r| text(r, "type")).unwrap_or_default();
        if layout.contains("Direct") || layout.contains("Cache") {
            return Err(AdapterError::unsupported(
                "fingerprint_unsupported",
                format!(
                    "the chunks of {}.{} have no fingerprint: its definition may call dictionary {full}, whose {layout} layout \
                     reads its source at each call, so nothing in the server's metadata dates the values a read returns; every \
                     chunk is transferred",
                    quote_ident(database),
                    quote_ident(table)
                ),
            ));
        }
        let contents = client
            .scalar(&format!(
                "SELECT concat(toString(count()), ' ', toString(sum(reinterpretAsUInt128(sipHash128(*))))) FROM dictionary({full})"
            ))
            .await
            .map_err(failed)?;
        out.push(format!("{} {contents}", lines(state).join(" ")));
    }
    Ok(out)
}

/// The parts holding rows, each with its visible rows and the window
/// column's range in them. Patch parts are never named by `_part`: the
/// rows are read with their patches applied.
async fn scan(client: &ChClient, database: &str, table: &str, window_column: &str) -> Result<Vec<PartRange>> {
    let c = quote_ident(window_column);
    let rows = client
        .query_rows(&format!(
            "SELECT _part AS name, toString(count()) AS n, toString(toUnixTimestamp64Micro(toDateTime64(min({c}), 6))) AS lo, \
             toString(toUnixTimestamp64Micro(toDateTime64(max({c}), 6))) AS hi, toString(countIf(isNotNull({c}))) AS k \
             FROM {}.{} GROUP BY _part",
            quote_ident(database),
            quote_ident(table)
        ))
        .await?;
    let mut parts = Vec::with_capacity(rows.len());
    for row in &rows {
        let with_values = number(row, "k")? > 0;
        let range = if with_values { Some((number(row, "lo")?, number(row, "hi")?)) } else { None };
        parts.push(PartRange { name: text(row, "name"), rows: number(row, "n")? as u64, range });
    }
    Ok(parts)
}

/// A fact the server did not give: a transient failure stays one (read
/// again); any other fails the fingerprint, never leaves the fact out.
fn incomplete(database: &str, table: &str, fact: &str, e: AdapterError) -> AdapterError {
    if e.class != ErrorClass::Permanent {
        return e;
    }
    AdapterError::permanent(
        "fingerprint_incomplete",
        format!(
            "the {fact} of {}.{} could not be read ({}): they decide what a read of the table returns, so no chunk's fingerprint \
             is complete without them, and every chunk is transferred",
            quote_ident(database),
            quote_ident(table),
            e.message
        ),
    )
    .hint("for unchanged chunks to be skipped, the source's user needs to be able to read it")
}

/// Each row as one line of JSON (its keys in a fixed order).
fn lines(rows: Vec<Row>) -> Vec<String> {
    rows.into_iter().map(|r| Value::Object(r).to_string()).collect()
}

fn text(row: &Row, key: &str) -> String {
    match row.get(key) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

fn number(row: &Row, key: &str) -> Result<i64> {
    text(row, key).parse::<i64>().map_err(|_| AdapterError::permanent("clickhouse_protocol", format!("`{key}` is not a number")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn function(name: &str, body: &str) -> Row {
        let mut row = Row::new();
        row.insert("name".into(), Value::String(name.into()));
        row.insert("create_query".into(), Value::String(format!("CREATE FUNCTION {name} AS x -> {body}")));
        row
    }

    #[test]
    fn a_function_counts_when_a_text_or_a_called_function_names_it() {
        let mut texts = vec!["CREATE TABLE d.t (`v` Int64, `w` Int64 ALIAS outer_fn(v)) ENGINE = MergeTree".to_string()];
        let functions = vec![function("unrelated", "x"), function("inner_fn", "x + 1"), function("outer_fn", "inner_fn(x) * 2")];
        let taken = called(&mut texts, functions);
        assert_eq!(taken.len(), 2, "{taken:?}");
        assert!(taken[0].contains("inner_fn") && taken[1].contains("outer_fn"), "{taken:?}");
        assert_eq!(texts.len(), 3);
        assert!(called(&mut vec!["CREATE TABLE d.t (`v` Int64)".to_string()], vec![function("f2", "x")]).is_empty());
    }
}

//! What the ClickHouse adapters are, for the plan and the command line's
//! registry (`dpone_core::adapter`), and the `sink.options.clickhouse_bulk`
//! and `sink.options.clickhouse` subtrees they own.

use dpone_core::Diagnostic;
use dpone_core::adapter::{PublicationText, SourceDescriptor, TargetDescriptor};
use dpone_core::manifest::schema::{Field, Shape, field, int, obj};
use dpone_core::manifest::{SinkSpec, System};
use dpone_core::types::{MappingRow, TypeMatrix};
use dpone_core::url::{component_userinfo, percent_encode};

/// ClickHouse, as manifests name it.
pub const SYSTEM: System = System::new("clickhouse", "ClickHouse");

pub static SOURCE: SourceDescriptor = SourceDescriptor {
    component_url,
    delivery_authority: Some(crate::delivery::AUTHORITY),
    ..SourceDescriptor::new(SYSTEM, "ClickHouse RowBinary over HTTP (re-read checked after EOF)")
};

pub static TARGET: TargetDescriptor = TargetDescriptor {
    append: Some(
        "a new table links every partition of the target (hard links, no row copied) and attaches the verified batch, is checked by part identity (or count and digest), gets the new mark in _dpone_marks keyed by its table UUID, then one EXCHANGE TABLES makes rows and mark visible together; the previous table is kept as the backup",
    ),
    merge: Some(
        "the generation holds only the verified batch; a new table links the target's partitions that hold no key of the batch (hard links, no row copied), copies the partitions that hold batch keys without the rows of those keys, and inserts the batch's version of each unique_key (the greatest cursor); it is checked (counts, each batch key exactly once, the resolved rows' digest), gets the new mark in _dpone_marks keyed by its table UUID, then one EXCHANGE TABLES makes rows and mark visible together; the previous table is kept as the backup",
    ),
    // A ClickHouse target always publishes a generation by EXCHANGE TABLES
    // (a TRUNCATE followed by INSERTs would show readers an empty or
    // partial table), so `overwrite_type: exchange` is honoured.
    exchanges_tables: true,
    // The original's `shadow_swap` is what a merge does here (a new table
    // without the batch keys' rows plus the batch, exchanged); its default
    // `lightweight_delete_insert` has the same outcome, published atomically.
    merge_policies: &["auto", "lightweight_delete_insert", "shadow_swap"],
    options,
    check_options,
    component_url,
    type_matrix: Some(TypeMatrix { mapping: "postgres -> clickhouse", rows: POSTGRES_TO_CLICKHOUSE }),
    ..TargetDescriptor::new(
        SYSTEM,
        &[System::named("postgres")],
        "RowBinary over HTTP",
        PublicationText {
            method: "exchange_tables",
            description: "one EXCHANGE TABLES target AND generation; the previous generation is kept as backup",
        },
    )
};

/// `sink.options.clickhouse_bulk` and `sink.options.clickhouse`.
fn options() -> Vec<Field> {
    vec![
        field(
            "clickhouse_bulk",
            obj(vec![
                field("mode", Shape::Enum(&["http", "native_tcp", "client"]), "HTTP ingestion (default http)"),
                field(
                    "ingest_contract",
                    Shape::Enum(&["auto", "typed_staging", "typed_binary_staging", "untyped_staging"]),
                    "Typed staging (default auto)",
                ),
            ]),
            "ClickHouse bulk load",
        ),
        field(
            "clickhouse",
            obj(vec![field(
                "disk_reserve_bytes",
                int(0, i64::MAX as i128),
                "Bytes of the target's disk a run must leave free; a run whose generation would not fit is refused before any write (default 1073741824)",
            )]),
            "ClickHouse target",
        ),
    ]
}

/// `sink.options.clickhouse.disk_reserve_bytes`: bytes of the target's
/// disk a run leaves free (None: [`crate::sink::DEFAULT_DISK_RESERVE_BYTES`]).
pub fn disk_reserve_bytes(sink: &SinkSpec) -> Option<u64> {
    sink.option_u64("clickhouse", "disk_reserve_bytes")
}

/// `sink.options.clickhouse_bulk`: only HTTP ingestion into typed staging
/// is implemented, and the subtree applies to ClickHouse sinks only.
fn check_options(sink: &SinkSpec, chosen: bool, refusals: &mut Vec<Diagnostic>) -> Option<PublicationText> {
    let mode = sink.option_str("clickhouse_bulk", "mode").unwrap_or("http");
    let ingest_contract = sink.option_str("clickhouse_bulk", "ingest_contract").unwrap_or("auto");
    if chosen && mode != "http" {
        refusals.push(
            Diagnostic::new(
                "unsupported_route_option:clickhouse_bulk.mode",
                "sink.options.clickhouse_bulk.mode",
                format!("ClickHouse ingestion mode `{mode}` is not implemented"),
            )
            .hint("use `http`"),
        );
    }
    if !chosen && (mode != "http" || ingest_contract != "auto") {
        refusals.push(
            Diagnostic::new(
                "unsupported_route_option:clickhouse_bulk",
                "sink.options.clickhouse_bulk",
                "clickhouse_bulk options apply to ClickHouse sinks only",
            )
            .hint("remove them"),
        );
    }
    if chosen && ingest_contract == "untyped_staging" {
        refusals.push(
            Diagnostic::new(
                "unsupported_route_option:clickhouse_bulk.ingest_contract",
                "sink.options.clickhouse_bulk.ingest_contract",
                "untyped staging cannot be verified with typed digests",
            )
            .hint("use `auto`, `typed_staging` or `typed_binary_staging`"),
        );
    }
    None
}

/// `http(s)://user:password@host:port/?database=...` from the component
/// variables (`_HOST` is required; `_SECURE` true, 1 or yes: HTTPS, port
/// 8443 by default, else 8123).
fn component_url(part: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    let host = part("HOST")?;
    let secure = matches!(part("SECURE").as_deref().map(str::to_ascii_lowercase).as_deref(), Some("true" | "1" | "yes"));
    let scheme = if secure { "https" } else { "http" };
    let port = part("PORT").unwrap_or_else(|| if secure { "8443" } else { "8123" }.into());
    let database = part("DATABASE").map(|d| format!("?database={}", percent_encode(&d))).unwrap_or_default();
    Some(format!("{scheme}://{}{host}:{port}/{database}", component_userinfo(part)))
}

/// PostgreSQL -> ClickHouse (SPEC §3).
const POSTGRES_TO_CLICKHOUSE: &[MappingRow] = &[
    MappingRow::new("smallint (int2)", "Int16", ""),
    MappingRow::new("integer (int4)", "Int32", ""),
    MappingRow::new("bigint (int8)", "Int64", ""),
    MappingRow::new("real (float4)", "Float32", "NaN and infinities are refused"),
    MappingRow::new("double precision (float8)", "Float64", "NaN and infinities are refused"),
    MappingRow::new("boolean", "Bool", ""),
    MappingRow::new("numeric(p,s), p <= 76", "Decimal(p,s)", "exact; scale and overflow checked, never rounded"),
    MappingRow::new("numeric without (p,s)", "refused", "declare numeric(p,s) so the precision is known"),
    MappingRow::new("text, varchar(n), char(n)", "String", "NULL and empty string stay distinct"),
    MappingRow::new("uuid", "UUID", ""),
    MappingRow::new("date", "Date or Date32", "values outside the target range are refused"),
    MappingRow::new("timestamp", "DateTime64(6)", "microseconds"),
    MappingRow::new("timestamptz", "DateTime64(6, 'UTC')", "microseconds, UTC"),
    MappingRow::new("json, jsonb, bytea", "refused", "needs an explicit contract (not yet supported)"),
    MappingRow::new("arrays, composites, ranges, intervals, others", "refused", "no exact mapping"),
];

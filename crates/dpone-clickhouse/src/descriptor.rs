//! What the ClickHouse adapters are, for the plan and the command line's
//! registry (`dpone_core::adapter`), and the `sink.options.clickhouse_bulk`
//! and `sink.options.clickhouse` subtrees they own.

use dpone_core::Diagnostic;
use dpone_core::adapter::{PublicationText, SourceDescriptor, TargetDescriptor};
use dpone_core::manifest::{SinkSpec, System};
use dpone_core::url::{component_userinfo, percent_encode};

pub static SOURCE: SourceDescriptor = SourceDescriptor {
    component_url,
    ..SourceDescriptor::new(System::Clickhouse, "ClickHouse RowBinary over HTTP (re-read checked after EOF)")
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
    check_options,
    component_url,
    ..TargetDescriptor::new(
        System::Clickhouse,
        &[System::Postgres],
        "RowBinary over HTTP",
        PublicationText {
            method: "exchange_tables",
            description: "one EXCHANGE TABLES target AND generation; the previous generation is kept as backup",
        },
    )
};

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

//! What the PostgreSQL adapters are, for the plan and the command line's
//! registry (`dpone_core::adapter`), and the `sink.options.postgres`
//! subtree they own.

use dpone_core::Diagnostic;
use dpone_core::adapter::{PublicationText, SourceDescriptor, TRANSACTIONAL_APPEND, TRANSACTIONAL_MERGE, TargetDescriptor};
use dpone_core::manifest::schema::{Field, Shape, field, obj};
use dpone_core::manifest::{SinkSpec, Strategy, System};
use dpone_core::types::{MappingRow, TypeMatrix};
use dpone_core::url::{component_userinfo, percent_encode};

/// PostgreSQL, as manifests name it.
pub const SYSTEM: System = System::new("postgres", "PostgreSQL");

pub static SOURCE: SourceDescriptor = SourceDescriptor {
    component_url,
    delivery_authority: Some(crate::delivery::AUTHORITY),
    ..SourceDescriptor::new(SYSTEM, "PostgreSQL binary COPY (shared snapshot)")
};

pub static TARGET: TargetDescriptor = TargetDescriptor {
    direct_transport: Some("PostgreSQL binary COPY into the target, inside the publishing transaction"),
    append: Some(TRANSACTIONAL_APPEND),
    merge: Some(TRANSACTIONAL_MERGE),
    options,
    check_options,
    component_url,
    type_matrix: Some(TypeMatrix { mapping: "clickhouse -> postgres", rows: CLICKHOUSE_TO_POSTGRES }),
    ..TargetDescriptor::new(
        SYSTEM,
        &[System::named("clickhouse")],
        "PostgreSQL binary COPY into staging",
        PublicationText {
            method: "serializable_transaction",
            description: "one SERIALIZABLE transaction: TRUNCATE (full refresh) or DELETE of the frozen window, INSERT from the verified generation, and a receipt row",
        },
    )
};

/// `sink.options.postgres`.
fn options() -> Vec<Field> {
    vec![field(
        "postgres",
        obj(vec![field(
            "publication",
            Shape::Enum(&["delete_insert", "partition_swap", "direct"]),
            "delete_insert (default): DELETE the window and INSERT; partition_swap: DETACH the window's partition and ATTACH the verified one; direct: COPY the chunks into the target inside the publishing transaction, no staging",
        )]),
        "PostgreSQL target",
    )]
}

/// `sink.options.postgres.publication`: `delete_insert` (default),
/// `partition_swap` or `direct`.
pub fn publication(sink: &SinkSpec) -> &str {
    sink.option_str("postgres", "publication").unwrap_or("delete_insert")
}

const PARTITION_SWAP: PublicationText = PublicationText {
    method: "partition_swap",
    description: "one SERIALIZABLE transaction: DETACH the window's partition (kept as backup), ATTACH the verified generation in its place, and a receipt row",
};

const DIRECT: PublicationText = PublicationText {
    method: "direct",
    description: "one SERIALIZABLE transaction locks the target against other writers, DELETEs the frozen window (every row, for a full refresh), COPYs each chunk into the target under a savepoint of its own and reads the chunk's range back there (count and digest), then writes a receipt row and commits: every row is written once; a run interrupted before the commit published nothing and reads the source again",
};

/// `partition_swap` and `direct` choose the publication; each applies to
/// PostgreSQL targets only, and to the strategies it can publish.
fn check_options(sink: &SinkSpec, chosen: bool, refusals: &mut Vec<Diagnostic>) -> Option<PublicationText> {
    let refuse = |code: &str, message: &str, hint: &str| {
        Diagnostic::new(code, "sink.options.postgres.publication", message.to_string()).hint(hint.to_string())
    };
    let (publication, message, fits, refused) = match publication(sink) {
        "partition_swap" => (
            PARTITION_SWAP,
            "partition_swap applies to PostgreSQL targets only",
            matches!(sink.strategy, Strategy::Replace { .. }),
            refuse(
                "partition_swap_unsupported_layout",
                "partition_swap replaces one window: it needs `mode: replace` with a window",
                "use delete_insert for full refreshes",
            ),
        ),
        "direct" => (
            DIRECT,
            "direct applies to PostgreSQL targets only",
            matches!(sink.strategy, Strategy::Replace { .. } | Strategy::FullRefresh { .. }),
            refuse(
                "unsupported_route_option:postgres.publication",
                "a direct publication replaces a window or the whole table; incremental strategies publish a verified batch",
                "use delete_insert (the default) with incremental_append or incremental_merge",
            ),
        ),
        _ => return None,
    };
    if !chosen {
        refusals.push(refuse("unsupported_route_option:postgres.publication", message, "remove sink.options.postgres"));
    }
    if !fits {
        refusals.push(refused);
    }
    Some(publication)
}

/// `postgresql://user:password@host:port/database` from the component
/// variables (`_HOST` is required).
fn component_url(part: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    let host = part("HOST")?;
    let port = part("PORT").map(|p| format!(":{p}")).unwrap_or_default();
    let database = part("DATABASE").map(|d| percent_encode(&d)).unwrap_or_default();
    Some(format!("postgresql://{}{host}{port}/{database}", component_userinfo(part)))
}

/// ClickHouse -> PostgreSQL.
const CLICKHOUSE_TO_POSTGRES: &[MappingRow] = &[
    MappingRow::new("Int8, Int16, UInt8", "smallint", ""),
    MappingRow::new("Int32, UInt16", "integer", ""),
    MappingRow::new("Int64, UInt32", "bigint", ""),
    MappingRow::new("UInt64", "numeric(20,0)", ""),
    MappingRow::new("Float32", "real", ""),
    MappingRow::new("Float64", "double precision", ""),
    MappingRow::new("Decimal(P,S)", "numeric(P,S)", "exact"),
    MappingRow::new("Bool", "boolean", ""),
    MappingRow::new("String", "text", "must be valid UTF-8 without NUL bytes; otherwise refused per value"),
    MappingRow::new("FixedString(N)", "bytea", "bytes kept exactly"),
    MappingRow::new("UUID", "uuid", ""),
    MappingRow::new("Date, Date32", "date", ""),
    MappingRow::new("DateTime", "timestamptz", ""),
    MappingRow::new("DateTime64(p<=6, tz)", "timestamptz", "DateTime64(p) without a zone maps to timestamp"),
    MappingRow::new("LowCardinality(T)", "mapping of T", ""),
    MappingRow::new("Nullable(T)", "mapping of T, NULL allowed", ""),
    MappingRow::new("Int128, Int256, UInt128, UInt256", "refused", "no exact transactional target type is admitted"),
    MappingRow::new("DateTime64(p>6)", "refused", "PostgreSQL keeps microseconds"),
    MappingRow::new("Array, Tuple, Map, JSON, Enum, geo", "refused", "flatten or cast in a view"),
];

//! What the PostgreSQL adapters are, for the plan and the command line's
//! registry (`dpone_core::adapter`), and the `sink.options.postgres`
//! subtree they own.

use dpone_core::Diagnostic;
use dpone_core::adapter::{PublicationText, SourceDescriptor, TRANSACTIONAL_APPEND, TRANSACTIONAL_MERGE, TargetDescriptor};
use dpone_core::manifest::{SinkSpec, Strategy, System};
use dpone_core::url::{component_userinfo, percent_encode};

pub static SOURCE: SourceDescriptor =
    SourceDescriptor { component_url, ..SourceDescriptor::new(System::Postgres, "PostgreSQL binary COPY (shared snapshot)") };

pub static TARGET: TargetDescriptor = TargetDescriptor {
    direct_transport: Some("PostgreSQL binary COPY into the target, inside the publishing transaction"),
    append: Some(TRANSACTIONAL_APPEND),
    merge: Some(TRANSACTIONAL_MERGE),
    check_options,
    component_url,
    ..TargetDescriptor::new(
        System::Postgres,
        &[System::Clickhouse],
        "PostgreSQL binary COPY into staging",
        PublicationText {
            method: "serializable_transaction",
            description: "one SERIALIZABLE transaction: TRUNCATE (full refresh) or DELETE of the frozen window, INSERT from the verified generation, and a receipt row",
        },
    )
};

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

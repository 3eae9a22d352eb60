//! What the SQLite adapters are, for the plan and the command line's
//! registry (`dpone_core::adapter`).

use dpone_core::Diagnostic;
use dpone_core::adapter::{PublicationText, SourceDescriptor, TRANSACTIONAL_APPEND, TRANSACTIONAL_MERGE, TargetDescriptor};
use dpone_core::manifest::{Manifest, System, TableRef};
use dpone_core::ports::Wiring;
use dpone_core::types::{MappingRow, TypeMatrix};

/// SQLite, as manifests name it.
pub const SYSTEM: System = System::new("sqlite", "SQLite");

pub static SOURCE: SourceDescriptor =
    SourceDescriptor { component_url, ..SourceDescriptor::new(SYSTEM, "SQLite rows -> typed RowBinary frames in process") };

pub static TARGET: TargetDescriptor = TargetDescriptor {
    append: Some(TRANSACTIONAL_APPEND),
    merge: Some(TRANSACTIONAL_MERGE),
    component_url,
    same_table: Some(same_table),
    type_matrix: Some(TypeMatrix { mapping: "sqlite <-> canonical", rows: SQLITE_TYPES }),
    ..TargetDescriptor::new(
        SYSTEM,
        &[SYSTEM],
        "SQLite staging tables",
        PublicationText {
            method: "sqlite_transaction",
            description: "one SQLite transaction replaces the target's rows with the verified generation",
        },
    )
};

/// SQLite reads `DPONE_CONN_<ID>_DATABASE` as the file.
fn component_url(part: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    part("DATABASE")
}

/// `source_is_target` decided by file identity: the plan compares the
/// manifest's strings, which miss `./source.db`, a symlink or a hard link
/// to the source. Two SQLite paths name one database when they resolve to
/// the same device and inode; table names are compared as SQLite does
/// (ASCII case-insensitively, `main` being the default schema). Reads file
/// metadata only.
fn same_table(manifest: &Manifest, wiring: &Wiring) -> Option<Diagnostic> {
    use std::os::unix::fs::MetadataExt;
    if manifest.source.system != SYSTEM || manifest.sink.system != SYSTEM {
        return None;
    }
    let path = |spec, at| crate::resolve_path(spec, wiring.base_dir, at, wiring.env).ok();
    let (src, dst) = (path(&manifest.source.connection, "source.connection")?, path(&manifest.sink.connection, "sink.connection")?);
    let same_file = match (std::fs::metadata(&src), std::fs::metadata(&dst)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        // A file that does not exist yet is the other only if the paths agree.
        _ => std::path::absolute(&src).ok()? == std::path::absolute(&dst).ok()?,
    };
    let schema = |t: &TableRef| t.schema.clone().unwrap_or_else(|| "main".into()).to_ascii_lowercase();
    let (s, t) = (&manifest.source.table, &manifest.sink.table);
    let same_table = s.name.eq_ignore_ascii_case(&t.name) && schema(s) == schema(t);
    (same_file && same_table && !(manifest.source.connection == manifest.sink.connection && s == t)).then(|| {
        Diagnostic::new(
            "source_is_target",
            "sink.table",
            format!("the sink table is the source table: {} and {} are one file", src.display(), dst.display()),
        )
        .hint("write into a different table or database file")
    })
}

/// SQLite (embedded default) declared types <-> canonical types.
const SQLITE_TYPES: &[MappingRow] = &[
    MappingRow::new("INTEGER, INT, BIGINT", "Int64", "stored as INTEGER"),
    MappingRow::new("SMALLINT", "Int16", "stored as INTEGER, range checked"),
    MappingRow::new("BOOLEAN", "Bool", "stored as INTEGER 0/1"),
    MappingRow::new("REAL, DOUBLE, FLOAT", "Float64", "stored as REAL"),
    MappingRow::new("TEXT, VARCHAR(n), CHAR(n), CLOB", "String", "stored as TEXT"),
    MappingRow::new("DECIMAL(p,s), NUMERIC(p,s)", "Decimal(p,s)", "stored as TEXT in plain decimal notation"),
    MappingRow::new("DATE", "Date32", "stored as TEXT YYYY-MM-DD"),
    MappingRow::new("TIMESTAMP, DATETIME", "DateTime64(6, 'UTC')", "stored as TEXT 'YYYY-MM-DD HH:MM:SS.ffffff' (UTC)"),
    MappingRow::new("UUID", "UUID", "stored as TEXT, lowercase canonical"),
    MappingRow::new("BLOB, untyped columns", "refused", "declare a type"),
];

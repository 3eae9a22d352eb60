//! The state store's tables and their versioned migrations.
//!
//! `state.table: {schema, name}` names three tables (`name` at most 52
//! bytes, so that every derived name fits PostgreSQL's 63):
//!
//! ```text
//! <schema>.<name>             records:  key PK, revision, body, written_by, fence, written_at
//! <schema>.<name>_leases      leases:   scope PK, holder, fence, expires_at, acquired_at, renewed_at
//! <schema>.<name>_migrations  versions: version PK, description, applied_at, applied_by
//! ```
//!
//! Migrations run in one transaction under a transaction-level advisory
//! lock named after the tables, so that processes starting together apply
//! each version once; a store whose recorded version is newer than this
//! binary knows is refused (an older dpone must not write a newer layout).

use std::fmt::Write as _;

/// The store's layout version this binary writes.
pub const SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;

/// `(description, SQL)` of every version, in order; the SQL's `{records}`,
/// `{leases}` and `{prefix_index}` are the quoted table names.
pub const MIGRATIONS: &[(&str, &str)] = &[
    (
        "leases with fences, revisioned records",
        "CREATE TABLE {leases} (
             scope text PRIMARY KEY,
             holder text NOT NULL,
             fence bigint NOT NULL CHECK (fence > 0),
             expires_at timestamptz NOT NULL);
         CREATE TABLE {records} (
             key text PRIMARY KEY,
             revision bigint NOT NULL CHECK (revision > 0),
             body text NOT NULL);",
    ),
    (
        "who wrote each record under which fence, lease times, prefix index for listings",
        "ALTER TABLE {records}
             ADD COLUMN written_by text,
             ADD COLUMN fence bigint,
             ADD COLUMN written_at timestamptz;
         ALTER TABLE {leases}
             ADD COLUMN acquired_at timestamptz,
             ADD COLUMN renewed_at timestamptz;
         CREATE INDEX {prefix_index} ON {records} (key text_pattern_ops);",
    ),
];

/// Longest `name`: the longest suffix (`_migrations`) must still fit 63 bytes.
pub const MAX_NAME_BYTES: usize = 63 - "_migrations".len();

/// The quoted names of one store's tables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tables {
    pub schema: String,
    pub name: String,
    pub records: String,
    pub leases: String,
    pub migrations: String,
    pub prefix_index: String,
    /// Key of the advisory lock that serializes migrations of these tables.
    pub lock_key: i64,
}

pub fn quote(ident: &str) -> String {
    format!("\"{}\"", ident.replace('"', "\"\""))
}

impl Tables {
    /// The tables of `schema.name` (checked by the caller's `validate`).
    pub fn new(schema: &str, name: &str) -> Self {
        let q = |suffix: &str| format!("{}.{}", quote(schema), quote(&format!("{name}{suffix}")));
        // FNV-1a over the qualified name: stable across processes and builds.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in format!("dpone-state:{schema}.{name}").bytes() {
            h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3);
        }
        Tables {
            schema: schema.to_string(),
            name: name.to_string(),
            records: q(""),
            leases: q("_leases"),
            migrations: q("_migrations"),
            prefix_index: quote(&format!("{name}_key_prefix")),
            lock_key: h as i64,
        }
    }

    /// Why `schema.name` cannot name a store, if it cannot.
    pub fn validate(schema: &str, name: &str) -> Result<(), String> {
        if schema.is_empty() || name.is_empty() {
            return Err("the state table needs a non-empty schema and name".into());
        }
        if schema.len() > 63 {
            return Err(format!("schema `{schema}` is longer than 63 bytes"));
        }
        if name.len() > MAX_NAME_BYTES {
            return Err(format!("table name `{name}` is longer than {MAX_NAME_BYTES} bytes (dpone adds `_migrations`)"));
        }
        if schema.contains('\0') || name.contains('\0') {
            return Err("names cannot contain NUL".into());
        }
        Ok(())
    }

    /// The SQL of version `v` (1-based).
    pub fn migration_sql(&self, v: u32) -> String {
        MIGRATIONS[(v - 1) as usize]
            .1
            .replace("{records}", &self.records)
            .replace("{leases}", &self.leases)
            .replace("{prefix_index}", &self.prefix_index)
    }

    /// The versions table, created when missing.
    pub fn bootstrap_sql(&self) -> String {
        let mut s = String::new();
        let _ = write!(
            s,
            "CREATE TABLE IF NOT EXISTS {} (
                 version integer PRIMARY KEY,
                 description text NOT NULL,
                 applied_at timestamptz NOT NULL DEFAULT clock_timestamp(),
                 applied_by text NOT NULL)",
            self.migrations
        );
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_quoted_and_bounded() {
        let t = Tables::new("ops", "dpone\"state");
        assert_eq!(t.records, "\"ops\".\"dpone\"\"state\"");
        assert_eq!(t.leases, "\"ops\".\"dpone\"\"state_leases\"");
        assert!(t.migration_sql(1).contains("CREATE TABLE \"ops\".\"dpone\"\"state_leases\""));
        assert!(Tables::validate("ops", &"n".repeat(MAX_NAME_BYTES)).is_ok());
        assert!(Tables::validate("ops", &"n".repeat(MAX_NAME_BYTES + 1)).is_err());
        assert!(Tables::validate("", "x").is_err());
        assert_ne!(Tables::new("a", "b").lock_key, Tables::new("a", "c").lock_key);
        assert_eq!(SCHEMA_VERSION, 2);
    }
}

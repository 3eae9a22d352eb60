//! The PostgreSQL state store passes the `StateStore` conformance suite
//! against the real server: handles of one process on several threads,
//! and handles in separate processes (this test binary re-run as
//! children). Each test uses a schema of its own. Also: the versioned
//! layout (created, migrated from an older version, refused when newer),
//! and a store that goes away and comes back.

use dpone_core::state::{StateStore, StoreError};
use dpone_postgres::PostgresStateStore;
use dpone_postgres::state_store::{MIGRATIONS, SCHEMA_VERSION};
use dpone_testkit::conformance;
use std::str::FromStr;

fn config() -> tokio_postgres::Config {
    tokio_postgres::Config::from_str(&dpone_testkit::postgres_url()).expect("the test URL parses")
}

fn open(schema: &str) -> PostgresStateStore {
    PostgresStateStore::open(config(), Default::default(), schema, "dpone_state", true).expect("the store opens").expect("created")
}

/// A plain client for inspecting and sabotaging (sync API over a runtime).
fn admin(sql: &str) -> Vec<tokio_postgres::SimpleQueryMessage> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let (client, conn) = config().connect(tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(conn);
        client.simple_query(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"))
    })
}

fn drop_schema(schema: &str) {
    admin(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"));
}

#[test]
fn postgres_state_store_conforms() {
    let schema = dpone_testkit::unique_name("st_conf");
    conformance::run_all(|| open(&schema));
    drop_schema(&schema);
}

/// The child side of `separate_processes` (does nothing when not a child).
#[test]
fn conformance_child_process() {
    if let Ok(schema) = std::env::var("DPONE_STATE_TEST_SCHEMA") {
        conformance::child(|| open(&schema));
    }
}

#[test]
fn concurrent_handles_in_separate_processes() {
    let schema = dpone_testkit::unique_name("st_procs");
    conformance::separate_processes(
        || open(&schema),
        |spec| conformance::spawn_child("conformance_child_process", spec, "DPONE_STATE_TEST_SCHEMA", &schema),
    );
    drop_schema(&schema);
}

fn version_rows(schema: &str) -> Vec<String> {
    admin(&format!("SELECT version || ':' || description FROM \"{schema}\".dpone_state_migrations ORDER BY version"))
        .into_iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
            _ => None,
        })
        .collect()
}

#[test]
fn the_layout_is_created_migrated_and_versioned() {
    let schema = dpone_testkit::unique_name("st_mig");
    // Nothing exists: a read-only open creates nothing.
    assert!(PostgresStateStore::open(config(), Default::default(), &schema, "dpone_state", false).unwrap().is_none());
    let exists = admin(&format!("SELECT 1 FROM pg_namespace WHERE nspname = '{schema}'"));
    assert!(!exists.iter().any(|m| matches!(m, tokio_postgres::SimpleQueryMessage::Row(_))), "no schema was created");

    // A store of version 1, written by an older dpone, with a lease and a record.
    let v1 = PostgresStateStore::open_at(config(), Default::default(), &schema, "dpone_state", true, 1).unwrap().unwrap();
    assert_eq!(v1.schema_version().unwrap(), 1);
    // (Written as that dpone did: this binary's statements need version 2.)
    admin(&format!(
        "INSERT INTO \"{schema}\".dpone_state_leases (scope, holder, fence, expires_at) VALUES ('s', 'old', 1, now() + interval '1 minute');
         INSERT INTO \"{schema}\".dpone_state (key, revision, body) VALUES ('run/x', 3, 'kept')"
    ));
    let lease = dpone_core::state::Lease { scope: "s".into(), holder: "old".into(), fence: 1 };
    drop(v1);

    // This dpone migrates it (also on a read-only open) and keeps what it held.
    let s = PostgresStateStore::open(config(), Default::default(), &schema, "dpone_state", false).unwrap().unwrap();
    assert_eq!(s.schema_version().unwrap(), SCHEMA_VERSION);
    assert_eq!(version_rows(&schema).len(), MIGRATIONS.len());
    assert_eq!(s.get("run/x").unwrap().map(|v| (v.revision, v.body)), Some((3, "kept".to_string())));
    assert_eq!(s.compare_and_set(&lease, "run/x", Some(3), "new"), Ok(4), "the lease taken under version 1 still holds");
    let written = admin(&format!("SELECT written_by || '/' || fence FROM \"{schema}\".dpone_state WHERE key = 'run/x'"));
    assert!(
        written.iter().any(|m| matches!(m, tokio_postgres::SimpleQueryMessage::Row(r) if r.get(0) == Some("old/1"))),
        "version 2 records who wrote under which fence"
    );
    // Opening again applies nothing twice.
    drop(open(&schema));
    assert_eq!(version_rows(&schema).len(), MIGRATIONS.len());

    // A layout newer than this binary knows is refused before any write.
    admin(&format!(
        "INSERT INTO \"{schema}\".dpone_state_migrations (version, description, applied_by) VALUES ({}, 'future', 'dpone 99')",
        SCHEMA_VERSION + 1
    ));
    match PostgresStateStore::open(config(), Default::default(), &schema, "dpone_state", true) {
        Err(StoreError::Io(m)) => assert!(m.contains("newer than this dpone knows"), "{m}"),
        other => panic!("a newer layout must be refused, got {other:?}"),
    }
    drop_schema(&schema);
}

/// The store's role loses its login and its sessions: every call fails
/// (`Io`), nothing is written; once the login is back the same handle
/// reconnects and the lease still fences.
#[test]
fn a_store_that_goes_away_fails_every_call_and_is_used_again_when_it_returns() {
    let schema = dpone_testkit::unique_name("st_away");
    let role = dpone_testkit::unique_name("st_role");
    admin(&format!("CREATE ROLE {role} LOGIN; GRANT CREATE ON DATABASE test TO {role}"));
    let mut c = config();
    c.user(&role);
    let s = PostgresStateStore::open(c, Default::default(), &schema, "dpone_state", true).unwrap().unwrap();
    let lease = s.acquire("s", "a", 60_000).unwrap();
    assert_eq!(s.compare_and_set(&lease, "k", None, "1"), Ok(1));

    admin(&format!("ALTER ROLE {role} NOLOGIN; SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{role}'"));
    assert!(matches!(s.compare_and_set(&lease, "k", Some(1), "2"), Err(StoreError::Io(_))));
    assert!(matches!(s.renew(&lease, 60_000), Err(StoreError::Io(_))));
    assert!(matches!(s.get("k"), Err(StoreError::Io(_))));

    admin(&format!("ALTER ROLE {role} LOGIN"));
    assert_eq!(s.get("k").unwrap().map(|v| v.revision), Some(1), "nothing was written while the store was away");
    assert_eq!(s.compare_and_set(&lease, "k", Some(1), "2"), Ok(2), "the same handle reconnects");
    drop(s);
    drop_schema(&schema);
    admin(&format!("REVOKE CREATE ON DATABASE test FROM {role}; DROP ROLE {role}"));
}

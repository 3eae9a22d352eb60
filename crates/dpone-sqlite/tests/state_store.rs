//! The SQLite state store passes the `StateStore` conformance suite, with
//! every handle opened separately on one file (as separate processes would).

use dpone_sqlite::SqliteStateStore;

#[test]
fn sqlite_state_store_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    dpone_testkit::conformance::run_all(|| SqliteStateStore::open(&path).unwrap());
}

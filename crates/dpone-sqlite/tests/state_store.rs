//! The SQLite state store passes the `StateStore` conformance suite, with
//! every handle opened separately on one file: on threads of one process,
//! and in separate processes (this test binary re-run as children).

use dpone_sqlite::SqliteStateStore;
use dpone_testkit::conformance;

#[test]
fn sqlite_state_store_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    conformance::run_all(|| SqliteStateStore::open(&path).unwrap());
}

/// The child side of `separate_processes` (does nothing when not a child).
#[test]
fn conformance_child_process() {
    if let Ok(path) = std::env::var("DPONE_STATE_TEST_FILE") {
        conformance::child(|| SqliteStateStore::open(std::path::Path::new(&path)).unwrap());
    }
}

#[test]
fn concurrent_handles_in_separate_processes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    conformance::separate_processes(
        || SqliteStateStore::open(&path).unwrap(),
        |spec| conformance::spawn_child("conformance_child_process", spec, "DPONE_STATE_TEST_FILE", &path),
    );
}

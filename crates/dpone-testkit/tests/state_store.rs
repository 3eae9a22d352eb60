//! `MemStateStore` passes the `StateStore` conformance suite, on real time
//! and on a manual clock, with every handle a clone of one store (as
//! separate processes sharing a state file would hold).

use dpone_testkit::MemStateStore;

#[test]
fn mem_state_store_conforms_on_real_time() {
    let store = MemStateStore::new();
    dpone_testkit::conformance::run_all(|| store.handle());
}

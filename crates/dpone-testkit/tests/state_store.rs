//! `MemStateStore` passes the `StateStore` conformance suite, with every
//! handle a clone of one store (as separate processes sharing a state file
//! would hold). The suite sleeps for lease expiry, so it runs on real time;
//! the manual clock is tested in the module.

use dpone_testkit::MemStateStore;

#[test]
fn mem_state_store_conforms_on_real_time() {
    let store = MemStateStore::new();
    dpone_testkit::conformance::run_all(|| store.handle());
}

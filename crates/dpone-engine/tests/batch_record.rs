//! The batch record: created on first change, changed under its lease,
//! waited for when another holder has it.

use dpone_core::state::StateStore;
use dpone_engine::{ProcessRecord, read_batch, update_batch};
use dpone_testkit::MemStateStore;

fn done(run: &str) -> ProcessRecord {
    ProcessRecord { status: "succeeded".into(), run_id: Some(run.into()), summary: serde_json::json!({"inserted_rows": 3}) }
}

#[test]
fn the_record_keeps_each_process_and_completes() {
    let store = MemStateStore::new();
    assert_eq!(read_batch(&store, "op").unwrap(), None);
    update_batch(&store, "me", "op", 1, &|| {}, |r| {
        r.fingerprint = "f".into();
        r.processes.insert("public.a".into(), done("r1"));
    })
    .unwrap();
    update_batch(&store, "me", "op", 1, &|| {}, |r| {
        r.processes.insert("public.b".into(), done("r2"));
        r.complete = true;
    })
    .unwrap();
    let r = read_batch(&store, "op").unwrap().unwrap();
    assert_eq!((r.operation.as_str(), r.fingerprint.as_str(), r.complete), ("op", "f", true));
    assert_eq!(r.processes.keys().collect::<Vec<_>>(), vec!["public.a", "public.b"]);
    assert_eq!(r.processes["public.a"], done("r1"));
}

#[test]
fn a_record_held_elsewhere_is_waited_for_then_given_up() {
    let store = MemStateStore::new();
    let other = store.acquire("batch/op", "someone else", 60_000).unwrap();
    let waited = std::cell::Cell::new(0);
    let e = update_batch(&store, "me", "op", 3, &|| waited.set(waited.get() + 1), |_| {}).unwrap_err();
    assert_eq!((e.code.as_str(), waited.get()), ("state_store_unavailable", 2));
    store.release(&other).unwrap();
    update_batch(&store, "me", "op", 3, &|| {}, |r| r.complete = true).unwrap();
    assert!(read_batch(&store, "op").unwrap().unwrap().complete);
}

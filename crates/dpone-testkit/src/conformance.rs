//! The conformance suite every `StateStore` must pass.
//!
//! `make` returns a new handle to the *same* backing store on every call,
//! as two processes sharing a state file would hold. [`run_all`] uses
//! handles of one process on several threads; [`separate_processes`] runs
//! the races between processes (each test binary that calls it also calls
//! [`child`], the side that runs in the spawned processes).

use crate::{FaultKind, FaultyStateStore, StoreFault, StoreOp};
use dpone_core::state::{StateStore, StoreError};
use std::sync::Arc;
use std::time::Duration;

/// Runs every check (the last ones through a [`FaultyStateStore`] around
/// the store); panics with a description on the first violation.
pub fn run_all<S: StateStore + 'static>(make: impl Fn() -> S) {
    leases_exclude_and_fence(&make);
    expired_leases_are_taken_over_and_fence_out_the_old_holder(&make);
    compare_and_set_checks_revisions(&make);
    release_frees_the_scope(&make);
    take_over_only_replaces_the_named_holder(&make);
    concurrent_writers_one_wins(&make);
    faults_at_the_port(&make);
}

fn leases_exclude_and_fence<S: StateStore>(make: &impl Fn() -> S) {
    let (a, b) = (make(), make());
    let l1 = a.acquire("scope/1", "proc-a", 60_000).expect("a free scope can be acquired");
    assert_eq!(l1.fence, 1, "the first acquire has fence 1");
    match b.acquire("scope/1", "proc-b", 60_000) {
        Err(StoreError::Held { holder, .. }) => assert_eq!(holder, "proc-a", "a refusal names the holder"),
        other => panic!("a live lease must exclude another holder, got {other:?}"),
    }
    let l1b = a.acquire("scope/1", "proc-a", 60_000).expect("the holder can re-acquire");
    assert_eq!(l1b.fence, 2, "every acquire grows the fence");
    assert_eq!(a.compare_and_set(&l1, "k/1", None, "x"), Err(StoreError::LeaseLost("scope/1".into())), "an old fence cannot write");
    assert_eq!(a.compare_and_set(&l1b, "k/1", None, "x"), Ok(1));
    let other = b.acquire("scope/2", "proc-b", 60_000).expect("other scopes are independent");
    assert_eq!(other.fence, 1);
}

fn expired_leases_are_taken_over_and_fence_out_the_old_holder<S: StateStore>(make: &impl Fn() -> S) {
    let (a, b) = (make(), make());
    let old = a.acquire("scope/exp", "proc-a", 50).unwrap();
    std::thread::sleep(Duration::from_millis(120));
    assert!(matches!(a.renew(&old, 50), Err(StoreError::LeaseLost(_))), "an expired lease cannot be renewed");
    let new = b.acquire("scope/exp", "proc-b", 60_000).expect("an expired lease can be taken over");
    assert!(new.fence > old.fence, "the new holder gets a higher fence");
    assert!(matches!(a.compare_and_set(&old, "k/exp", None, "late"), Err(StoreError::LeaseLost(_))), "the old holder is fenced out");
    assert!(matches!(a.renew(&old, 60_000), Err(StoreError::LeaseLost(_))));
    assert_eq!(b.get("k/exp").unwrap(), None, "nothing of the fenced write landed");
    b.renew(&new, 60_000).expect("the current holder renews");
}

fn compare_and_set_checks_revisions<S: StateStore>(make: &impl Fn() -> S) {
    let s = make();
    let lease = s.acquire("scope/cas", "proc", 60_000).unwrap();
    assert_eq!(s.compare_and_set(&lease, "rec", None, "v1"), Ok(1));
    assert!(matches!(s.compare_and_set(&lease, "rec", None, "again"), Err(StoreError::Conflict { found: Some(1), .. })));
    assert_eq!(s.compare_and_set(&lease, "rec", Some(1), "v2"), Ok(2));
    assert!(matches!(s.compare_and_set(&lease, "rec", Some(1), "stale"), Err(StoreError::Conflict { found: Some(2), .. })));
    let got = make().get("rec").unwrap().expect("another handle reads the record");
    assert_eq!((got.revision, got.body.as_str()), (2, "v2"));
    assert_eq!(s.keys("re").unwrap(), vec!["rec".to_string()]);
    assert!(s.keys("zzz").unwrap().is_empty());
}

fn release_frees_the_scope<S: StateStore>(make: &impl Fn() -> S) {
    let (a, b) = (make(), make());
    let l = a.acquire("scope/rel", "proc-a", 60_000).unwrap();
    a.release(&l).unwrap();
    let l2 = b.acquire("scope/rel", "proc-b", 60_000).expect("a released scope is free");
    assert!(l2.fence > l.fence, "fences never go back");
    assert!(matches!(a.compare_and_set(&l, "k/rel", None, "x"), Err(StoreError::LeaseLost(_))));
}

fn concurrent_writers_one_wins<S: StateStore + 'static>(make: &impl Fn() -> S) {
    let setup = make();
    let lease = setup.acquire("scope/race", "proc", 60_000).unwrap();
    setup.compare_and_set(&lease, "race", None, "0").unwrap();
    let wins: Vec<bool> = (0..4)
        .map(|i| {
            let store = Arc::new(make());
            let lease = lease.clone();
            std::thread::spawn(move || store.compare_and_set(&lease, "race", Some(1), &format!("w{i}")).is_ok())
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .collect();
    assert_eq!(wins.iter().filter(|w| **w).count(), 1, "exactly one of several writers with the same expected revision wins");
    assert_eq!(setup.get("race").unwrap().unwrap().revision, 2);
}

fn take_over_only_replaces_the_named_holder<S: StateStore>(make: &impl Fn() -> S) {
    let (a, b) = (make(), make());
    let dead = a.acquire("scope/take", "proc-dead", 60_000).unwrap();
    match b.take_over("scope/take", "proc-other", "proc-b", 60_000) {
        Err(StoreError::Held { holder, .. }) => assert_eq!(holder, "proc-dead", "naming the wrong stale holder takes nothing over"),
        other => panic!("expected Held, got {other:?}"),
    }
    let l = b.take_over("scope/take", "proc-dead", "proc-b", 60_000).expect("the named stale holder is replaced");
    assert!(l.fence > dead.fence);
    assert!(matches!(a.compare_and_set(&dead, "k/take", None, "x"), Err(StoreError::LeaseLost(_))), "the replaced holder is fenced out");
}

/// The store behind a [`FaultyStateStore`]: a fault fails its call with
/// [`StoreError::Io`] naming the fault; `ack_lost` performs the call (the
/// write landed, as a lost acknowledgement leaves it), the other kinds do
/// not; the calls after it go through.
fn faults_at_the_port<S: StateStore>(make: &impl Fn() -> S) {
    let plain = make();
    let faulty = |fault: StoreFault| (FaultyStateStore::new(make(), vec![fault]), fault);
    let lease = plain.acquire("faults/cas", "proc", 60_000).unwrap();
    for (i, kind) in FaultKind::ALL.into_iter().enumerate() {
        let key = format!("faults/rec/{i}");
        let (store, fault) = faulty(StoreFault::new(StoreOp::CompareAndSet, kind, 1));
        named(store.compare_and_set(&lease, &key, None, "v1"), fault);
        let landed = plain.get(&key).unwrap().map(|v| v.revision);
        if kind.performs() {
            assert_eq!(landed, Some(1), "{fault}: the write whose acknowledgement was lost landed");
            let again = store.compare_and_set(&lease, &key, None, "v1");
            assert!(matches!(again, Err(StoreError::Conflict { found: Some(1), .. })), "{fault}: a blind retry conflicts: {again:?}");
        } else {
            assert_eq!(landed, None, "{fault}: a call not performed wrote nothing");
            assert_eq!(store.compare_and_set(&lease, &key, None, "v1"), Ok(1), "{fault}: the next call goes through");
        }
        assert_eq!((store.fired(), store.calls(StoreOp::CompareAndSet)), (vec![fault], 2));
    }

    let (store, fault) = faulty(StoreFault::new(StoreOp::Acquire, FaultKind::Timeout, 1));
    named(store.acquire("faults/acquire", "proc-a", 60_000), fault);
    let l = plain.acquire("faults/acquire", "proc-b", 60_000).expect("an acquire not performed took nothing");
    assert_eq!(l.fence, 1, "{fault}: the fence did not grow");
    let (store, fault) = faulty(StoreFault::new(StoreOp::Acquire, FaultKind::AckLost, 1));
    named(store.acquire("faults/granted", "proc-a", 60_000), fault);
    match plain.acquire("faults/granted", "proc-b", 60_000) {
        Err(StoreError::Held { holder, .. }) => assert_eq!(holder, "proc-a", "{fault}: the lease was granted"),
        other => panic!("{fault}: the lease was granted, got {other:?}"),
    }
    assert_eq!(store.acquire("faults/granted", "proc-a", 60_000).map(|l| l.fence), Ok(2), "{fault}: the holder acquires again");

    let (store, fault) = faulty(StoreFault::new(StoreOp::Get, FaultKind::Transient, 1));
    named(store.get("faults/rec/0"), fault);
    assert_eq!(store.get("faults/rec/0").unwrap().map(|v| v.revision), Some(1), "{fault}: the next read goes through");
    let (store, fault) = faulty(StoreFault::new(StoreOp::Renew, FaultKind::Permanent, 1));
    named(store.renew(&lease, 60_000), fault);
    store.renew(&lease, 60_000).expect("the next renewal goes through");
}

/// Asserts that `r` is the I/O error of the injected `fault`.
fn named<T: std::fmt::Debug>(r: Result<T, StoreError>, fault: StoreFault) {
    match r {
        Err(StoreError::Io(m)) => assert!(m.contains(&format!("`{fault}`")), "the error names the fault {fault}: {m}"),
        other => panic!("{fault}: expected an I/O error, got {other:?}"),
    }
}

/// Environment variable that makes a test binary act as one child of
/// [`separate_processes`] (see [`child`]).
pub const CHILD_ENV: &str = "DPONE_CONFORMANCE_CHILD";

/// Exit codes of a child: what its one call returned.
const WON: i32 = 0;
const CONFLICT: i32 = 10;
const LOST: i32 = 11;
const HELD: i32 = 12;
const FAILED: i32 = 13;

/// Handles in separate processes (each with its own connection or file
/// handle), released at the same instant:
///
/// - several processes acquire one free scope: exactly one gets it, the
///   others are refused with the winner named;
/// - several processes write the same revision of one record under the
///   current lease: exactly one write lands;
/// - after a takeover, processes holding the old fence write nothing.
///
/// `spawn(spec)` starts this test binary so that it runs [`child`] with
/// `CHILD_ENV=spec` (e.g. `cargo test`'s `--exact <name>` on a test that
/// calls [`child`]). Panics with a description on the first violation.
pub fn separate_processes<S: StateStore>(make: impl Fn() -> S, spawn: impl Fn(&str) -> std::process::Child) {
    const N: usize = 4;
    let s = make();
    let start = || now_ms() + 1_500;
    let run = |specs: Vec<String>| -> Vec<i32> {
        let children: Vec<_> = specs.iter().map(|spec| spawn(spec)).collect();
        children.into_iter().map(|c| c.wait_with_output().expect("a child process ends").status.code().unwrap_or(-1)).collect()
    };

    let at = start();
    let codes = run((0..N).map(|i| format!("acquire\tscope/procs\tchild-{i}\t0\t-\t-\t{at}")).collect());
    assert_eq!(codes.iter().filter(|c| **c == WON).count(), 1, "exactly one process acquires a free scope: {codes:?}");
    assert_eq!(codes.iter().filter(|c| **c == HELD).count(), N - 1, "the other processes are refused: {codes:?}");

    let lease = s.acquire("scope/procs2", "parent", 60_000).expect("a free scope");
    s.compare_and_set(&lease, "procs/race", None, "0").expect("the first write");
    let at = start();
    let codes = run((0..N).map(|i| format!("cas\tscope/procs2\tparent\t{}\tprocs/race\t1\t{at}\tw{i}", lease.fence)).collect());
    assert_eq!(codes.iter().filter(|c| **c == WON).count(), 1, "exactly one of several processes writing revision 1 wins: {codes:?}");
    assert_eq!(codes.iter().filter(|c| **c == CONFLICT).count(), N - 1, "the others see a conflict: {codes:?}");
    assert_eq!(s.get("procs/race").unwrap().map(|v| v.revision), Some(2));

    let new = s.take_over("scope/procs2", "parent", "successor", 60_000).expect("the named holder is replaced");
    assert!(new.fence > lease.fence);
    let at = start();
    let codes = run((0..N).map(|i| format!("cas\tscope/procs2\tparent\t{}\tprocs/race\t2\t{at}\tlate{i}", lease.fence)).collect());
    assert!(codes.iter().all(|c| *c == LOST), "processes holding the old fence are fenced out: {codes:?}");
    let kept = s.get("procs/race").unwrap().expect("the record");
    assert_eq!(kept.revision, 2, "nothing of the fenced writes landed");
    assert!(kept.body.starts_with('w'), "the record is the winner's: {}", kept.body);
}

/// The child side of [`separate_processes`]: when `CHILD_ENV` is set,
/// waits for the start instant, makes its one call and exits with its
/// outcome; returns (doing nothing) when it is not set.
pub fn child<S: StateStore>(make: impl Fn() -> S) {
    let Ok(spec) = std::env::var(CHILD_ENV) else { return };
    let f: Vec<&str> = spec.split('\t').collect();
    let store = make();
    let start: u64 = f[6].parse().expect("start instant");
    std::thread::sleep(Duration::from_millis(start.saturating_sub(now_ms())));
    let code = match f[0] {
        "acquire" => match store.acquire(f[1], f[2], 60_000) {
            Ok(_) => WON,
            Err(StoreError::Held { holder, .. }) if holder.starts_with("child-") => HELD,
            Err(_) => FAILED,
        },
        _ => {
            let lease = dpone_core::state::Lease { scope: f[1].into(), holder: f[2].into(), fence: f[3].parse().expect("fence") };
            match store.compare_and_set(&lease, f[4], Some(f[5].parse().expect("revision")), f[7]) {
                Ok(_) => WON,
                Err(StoreError::Conflict { .. }) => CONFLICT,
                Err(StoreError::LeaseLost(_)) => LOST,
                Err(_) => FAILED,
            }
        }
    };
    std::process::exit(code);
}

/// Starts this test binary as one child of [`separate_processes`]: it runs
/// only the test `test` (one that calls [`child`]) with `CHILD_ENV=spec`,
/// and `var=value` to say which store to open.
pub fn spawn_child(test: &str, spec: &str, var: &str, value: impl AsRef<std::ffi::OsStr>) -> std::process::Child {
    std::process::Command::new(std::env::current_exe().expect("the test binary's path"))
        .args(["--exact", test, "--nocapture", "--test-threads", "1"])
        .env(CHILD_ENV, spec)
        .env(var, value)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("the test binary starts")
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

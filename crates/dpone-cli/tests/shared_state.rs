//! Runs on many machines: one PostgreSQL state store (`state: {type:
//! postgres}`) shared by "hosts" that share nothing else. Each host is a
//! folder of its own holding the same manifest text, so its work dir
//! (`.dpone` next to the manifest: evidence, nothing else) is its own; the
//! real `dpone` binary runs against the real servers on both routes.
//!
//! A shared store frees a lease by expiry only (a host name does not tell
//! process namespaces apart), so these tests shorten the lease
//! (`DPONE_TEST_LEASE_TTL_MS`) and wait it out where a host "dies".

mod ch_postgres_common;
mod harness;
mod recovery_common;

use harness::{Background, Run, state_of, wait_until};
use std::path::{Path, PathBuf};
use std::time::Duration;

const INTERVAL_END: &str = "2026-09-09T00:00:00Z";

/// One state store schema and the URL its manifests read (`DPONE_CONN_STATE`).
struct StateDb {
    schema: String,
    url: String,
    /// A role of its own, whose login a test can take away.
    role: Option<String>,
}

fn admin(sql: &str) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(&dpone_testkit::postgres_url(), tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(conn);
        client.batch_execute(sql).await.unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    });
}

impl StateDb {
    fn new() -> StateDb {
        StateDb { schema: dpone_testkit::unique_name("ss"), url: dpone_testkit::postgres_url(), role: None }
    }

    /// A store reached as a role of its own (see [`StateDb::cut`]).
    fn with_role() -> StateDb {
        let role = dpone_testkit::unique_name("ss_role");
        admin(&format!("CREATE ROLE {role} LOGIN; GRANT CREATE ON DATABASE test TO {role}"));
        let url = format!("postgresql://{role}@127.0.0.1:5432/test");
        StateDb { role: Some(role), url, ..StateDb::new() }
    }

    /// The store becomes unreachable: its role loses its login and its sessions.
    fn cut(&self) {
        let role = self.role.as_ref().expect("a role of its own");
        admin(&format!("ALTER ROLE {role} NOLOGIN; SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{role}'"));
    }

    fn restore(&self) {
        admin(&format!("ALTER ROLE {} LOGIN", self.role.as_ref().expect("a role of its own")));
    }

    fn drop(self) {
        admin(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema));
        if let Some(role) = &self.role {
            admin(&format!("REVOKE CREATE ON DATABASE test FROM {role}; DROP ROLE {role}"));
        }
    }
}

/// A host: its own folder with the fixture's manifest, whose `runtime`
/// block (the fixture's work dir) is replaced by the shared `state:` block.
struct Host {
    dir: PathBuf,
    manifest: String,
    env: Vec<(String, String)>,
}

impl Host {
    fn new(fixture_manifest: &Path, parent: &Path, name: &str, state: &StateDb, clickhouse_url: &str) -> Host {
        let text = std::fs::read_to_string(fixture_manifest).expect("the fixture's manifest");
        let text = &text[..text.find("runtime:").expect("the fixture's manifest ends with its runtime block")];
        let yaml = format!(
            "{text}state:\n  type: postgres\n  connection: {{connection_type: env, connection_id: STATE}}\n  table: {{schema: {}, name: dpone_state}}\n",
            state.schema
        );
        let dir = parent.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("manifest.yaml"), yaml).unwrap();
        let env = vec![
            ("DPONE_CONN_PG".to_string(), dpone_testkit::postgres_url()),
            ("DPONE_CONN_CH".to_string(), clickhouse_url.to_string()),
            ("DPONE_CONN_STATE".to_string(), state.url.clone()),
        ];
        Host { manifest: dir.join("manifest.yaml").display().to_string(), dir, env }
    }

    fn env<'a>(&'a self, extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
        let mut env: Vec<(&str, &str)> = self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        env.extend_from_slice(extra);
        env
    }

    fn run_args(&self) -> [&str; 6] {
        ["run", &self.manifest, "--interval-end", INTERVAL_END, "--format", "json"]
    }

    fn run(&self, extra: &[(&str, &str)]) -> Run {
        harness::run(&self.dir, &self.run_args(), &self.env(extra))
    }

    fn spawn(&self, extra: &[(&str, &str)]) -> Background {
        harness::spawn(&self.dir, &self.run_args(), &self.env(extra))
    }

    fn dpone(&self, args: &[&str]) -> Run {
        harness::run(&self.dir, args, &self.env(&[]))
    }

    fn status(&self) -> serde_json::Value {
        self.dpone(&["status", &self.manifest, "--format", "json"]).status_json()
    }

    /// Files of this host's work dir (evidence only: the journal is in the store).
    fn work_files(&self) -> Vec<String> {
        fn walk(p: &Path, out: &mut Vec<String>) {
            for e in std::fs::read_dir(p).into_iter().flatten().flatten() {
                if e.path().is_dir() {
                    walk(&e.path(), out);
                } else {
                    out.push(e.file_name().to_string_lossy().into_owned());
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.dir.join(".dpone"), &mut out);
        out
    }
}

/// Waits until the shared journal records `what` (seen from `host`).
fn wait_for_journal(host: &Host, a: &mut Background, what: &str, done: impl Fn(&serde_json::Value) -> bool) {
    wait_until(Duration::from_secs(60), what, || {
        assert!(a.is_running(), "expected the background run to be pausing ({what})");
        done(&host.status())
    });
}

/// Two hosts sharing `state`, beside the fixture's manifest.
fn hosts(manifest: &Path, parent: &Path, state: &StateDb, clickhouse_url: &str) -> (Host, Host) {
    (Host::new(manifest, parent, "host-a", state, clickhouse_url), Host::new(manifest, parent, "host-b", state, clickhouse_url))
}

/// Host A never renews its 6 s lease and stands still right before its
/// publishing call, long after the lease expired; host B takes the lease
/// over and resumes the run to its end; A, woken up, is fenced out
/// (`lease_lost`). Returns B's report.
fn take_over(a: &Host, b: &Host) -> serde_json::Value {
    let mut run_a = a.spawn(&[
        ("DPONE_TEST_LEASE_TTL_MS", "6000"),
        ("DPONE_FAILPOINT", "lease.stop_renewal"),
        ("DPONE_FAILPOINT_SLEEP", "publish.before_exchange:15000"),
    ]);
    wait_for_journal(a, &mut run_a, "A recorded its publication intent", |s| state_of(s) == "publishing");
    std::thread::sleep(Duration::from_millis(6200));
    let doc = b.run(&[]).assert_succeeded("host B, taking the expired lease over");
    assert_eq!(doc["resumed"], true);
    assert!(run_a.is_running(), "A is still standing before its publishing call");
    run_a.wait().assert_failed("host A after the takeover", 1, "lease_lost");
    doc
}

fn holder_pid(doc_or_stderr: &str, pid: u32) -> bool {
    doc_or_stderr.contains(&format!("pid {pid} "))
}

/// `DPONE_STATE_URL` names the store of a manifest without a `state:`
/// block; with one as well, the run is refused before anything happens.
#[test]
fn the_state_url_names_the_store_and_never_competes_with_a_state_block() {
    let fx = recovery_common::sqlite::Fixture::standard();
    let dir = fx.dir.clone();
    let manifest = fx.manifest.clone();
    let url = dpone_testkit::postgres_url();
    let env = [("DPONE_STATE_URL", url.as_str())];
    fx.run_with(&env).assert_succeeded("a run with DPONE_STATE_URL");
    let status = harness::run(&dir, &["status", &manifest, "--format", "json"], &env).json();
    assert_eq!(state_of(&status), "succeeded", "{status:#}");
    assert!(status["state_store"].as_str().unwrap_or("").ends_with("#dpone.dpone_state"), "{status:#}");
    assert!(!dir.join("work/state.db").exists(), "no local state with a shared store");
    let local = harness::run(&dir, &["status", &manifest, "--format", "json"], &[]).json();
    assert_eq!(state_of(&local), "none", "without the variable, the (empty) local store: {local:#}");

    let text = std::fs::read_to_string(&fx.manifest).unwrap();
    std::fs::write(&fx.manifest, format!("{text}state: {{type: sqlite}}\n")).unwrap();
    for args in [vec!["manifest", "validate", &manifest], vec!["run", &manifest, "--interval-end", INTERVAL_END]] {
        let refused = harness::run(&dir, &args, &env);
        assert_eq!(refused.code, Some(2), "{}", refused.describe());
        assert!(refused.stderr.contains("state_store_ambiguous"), "{}", refused.describe());
    }
    admin("DELETE FROM dpone.dpone_state WHERE key LIKE 'run/%' OR key LIKE 'history/%' OR key LIKE 'evidence/%'");
}

mod pg_to_clickhouse {
    use super::*;
    use recovery_common::pgch::{Fixture, Standard, assert_same_rows};

    fn hosts(fx: &Fixture, state: &StateDb) -> (Host, Host) {
        super::hosts(&fx.manifest, fx.dir(), state, &fx.clickhouse_url)
    }

    /// Two processes with different work dirs and one store, started
    /// together on one target: one runs, the other is refused naming it.
    #[test]
    fn two_hosts_started_together_one_runs_the_other_is_refused_with_the_holder_named() {
        let s = Standard::new("ss_together");
        let fx = &s.fx;
        let state = StateDb::new();
        let (a, b) = hosts(fx, &state);
        // Whoever wins holds the lease for a while: the other one surely meets it.
        let slow = [("DPONE_FAILPOINT_SLEEP", "publish.before_intent:3000")];
        let (pa, pb) = (a.spawn(&slow), b.spawn(&slow));
        let (ida, idb) = (pa.pid(), pb.pid());
        let (ra, rb) = (pa.wait(), pb.wait());
        let (winner, loser, winner_pid) = match (ra.code, rb.code) {
            (Some(0), Some(2)) => (ra, rb, ida),
            (Some(2), Some(0)) => (rb, ra, idb),
            _ => panic!("expected one run to succeed and the other to be refused:\n{}\n{}", ra.describe(), rb.describe()),
        };
        winner.assert_succeeded("the run that got the lease");
        loser.assert_failed("the run that met the lease", 2, "lease_held");
        assert!(
            holder_pid(&loser.stdout, winner_pid) || holder_pid(&loser.stderr, winner_pid),
            "the refusal names the holder (pid {winner_pid}):\n{}",
            loser.describe()
        );
        assert_same_rows(&s.expected, &fx.target_rows(), "the target after the one run");
        fx.assert_clean_after_success("after the one run");
        state.drop();
        s.finish();
    }

    /// kill -9 of a run on host A after its stage completed; host B (an
    /// empty work dir) resumes A's run from the shared journal and
    /// publishes once; status, resolve and abandon work from either host.
    #[test]
    fn a_run_killed_on_host_a_is_resumed_by_host_b_and_published_exactly_once() {
        let s = Standard::new("ss_resume");
        let fx = &s.fx;
        let state = StateDb::new();
        let (a, b) = hosts(fx, &state);

        let mut run_a = a.spawn(&[("DPONE_TEST_LEASE_TTL_MS", "3000"), ("DPONE_FAILPOINT_SLEEP", "publish.before_intent:30000")]);
        wait_for_journal(&a, &mut run_a, "host A built its generation", |s| s["journal"]["generation"].is_object());
        let pid_a = run_a.pid();
        run_a.signal("KILL");
        let killed = run_a.wait();
        assert_eq!(killed.signal, Some(9), "{}", killed.describe());

        // Host B sees A's journal (its work dir is empty), and A's lease.
        let seen = b.status();
        assert_eq!(state_of(&seen), "verified", "host B reads A's journal: {seen:#}");
        assert!(holder_pid(seen["journal"]["last_holder"].as_str().unwrap_or(""), pid_a), "{seen:#}");
        let early = b.run(&[]);
        early.assert_failed("host B while A's lease is live", 2, "lease_held");
        assert!(holder_pid(&early.stdout, pid_a) || holder_pid(&early.stderr, pid_a), "{}", early.describe());
        assert_same_rows(&s.before, &fx.target_rows(), "the target before B's run");
        assert_eq!(fx.target_uuid(), s.uuid_before);

        // After the lease expired, B resumes from the verified staging.
        std::thread::sleep(Duration::from_millis(3200));
        let doc = b.run(&[]).assert_succeeded("host B resuming host A's run");
        assert_eq!(doc["resumed"], true, "B continued A's run: {doc:#}");
        assert_eq!(doc["run_id"], seen["run_id"], "the same run");
        assert_same_rows(&s.expected, &fx.target_rows(), "the target after B's run");
        // Exactly once: one EXCHANGE, the backup is the previous target.
        let backup = fx.assert_clean_after_success("after B's run").expect("a backup");
        assert_same_rows(&s.before, &fx.table_rows(&backup), "the backup (the target before the one publication)");

        // Host A (which never finished) sees the success and its evidence,
        // read from the store; the evidence file is on host B.
        let seen = a.status();
        assert_eq!(state_of(&seen), "succeeded", "{seen:#}");
        assert_eq!(seen["evidence"]["run_id"], doc["run_id"], "the evidence is read from the store on host A: {seen:#}");
        assert!(b.work_files().iter().any(|f| f.starts_with("evidence-")), "B wrote its evidence file: {:?}", b.work_files());
        assert!(!a.work_files().iter().any(|f| f == "state.db"), "no local state on A: {:?}", a.work_files());

        // The same command on A now starts a new execution (nothing to resume).
        let again = a.run(&[]).assert_succeeded("host A after B's success");
        assert_eq!(again["execution"], doc["execution"].as_u64().unwrap() + 1);
        state.drop();
        s.finish();
    }

    /// `abandon` and `status` from another host: A crashes while staging;
    /// B abandons the run (once A's lease expired), then runs the window.
    #[test]
    fn an_operator_on_host_b_abandons_the_run_host_a_left() {
        let s = Standard::new("ss_abandon");
        let fx = &s.fx;
        let state = StateDb::new();
        let (a, b) = hosts(fx, &state);
        a.run(&[("DPONE_TEST_LEASE_TTL_MS", "2000"), ("DPONE_FAILPOINT", "checkpoint.after_write:1")])
            .assert_aborted_at("checkpoint.after_write");
        assert_eq!(state_of(&b.status()), "staging");
        let held = b.dpone(&["abandon", &b.manifest]);
        assert_eq!(held.code, Some(2), "A's lease is still live:\n{}", held.describe());
        assert!(held.stderr.contains("lease"), "{}", held.describe());
        std::thread::sleep(Duration::from_millis(2200));
        let done = b.dpone(&["abandon", &b.manifest]);
        assert_eq!(done.code, Some(0), "{}", done.describe());
        assert_eq!(state_of(&a.status()), "failed", "host A sees B's verdict");
        b.run(&[]).assert_succeeded("host B's run after the abandon");
        assert_same_rows(&s.expected, &fx.target_rows(), "the target");
        fx.assert_clean_after_success("after B's run (A's staging was dropped)");
        state.drop();
        s.finish();
    }

    /// The state store becomes unreachable while the run pauses before
    /// its publication intent: the run stops before publication (nothing
    /// visible), and once the store is back the next run publishes once.
    #[test]
    fn a_state_store_that_goes_away_stops_the_run_before_publication_and_the_run_recovers_when_it_returns() {
        let s = Standard::new("ss_away");
        let fx = &s.fx;
        let state = StateDb::with_role();
        let (a, _) = hosts(fx, &state);

        let mut run = a.spawn(&[("DPONE_TEST_LEASE_TTL_MS", "3000"), ("DPONE_FAILPOINT_SLEEP", "publish.before_intent:4000")]);
        wait_for_journal(&a, &mut run, "the run built its generation", |s| s["journal"]["generation"].is_object());
        state.cut();
        let stopped = run.wait();
        let doc = stopped.assert_failed("the run whose state store went away", 1, "state_store");
        assert_eq!(doc["publication"], "absent", "{}", stopped.describe());
        assert_same_rows(&s.before, &fx.target_rows(), "the target while the store was away");
        assert_eq!(fx.target_uuid(), s.uuid_before, "no EXCHANGE");
        let away = a.dpone(&["status", &a.manifest, "--format", "json"]);
        assert_eq!(away.code, Some(2), "status cannot read an unreachable store:\n{}", away.describe());

        state.restore();
        assert_eq!(state_of(&a.status()), "verified", "the journal kept what was recorded before the store went away");
        std::thread::sleep(Duration::from_millis(3200));
        let doc = a.run(&[]).assert_succeeded("the run after the store returned");
        assert_eq!(doc["resumed"], true);
        assert_same_rows(&s.expected, &fx.target_rows(), "the target after recovery");
        let backup = fx.assert_clean_after_success("after recovery").expect("a backup");
        assert_same_rows(&s.before, &fx.table_rows(&backup), "published exactly once");
        state.drop();
        s.finish();
    }

    /// A run that lost its lease to a takeover while it stood right before
    /// its publishing call cannot publish: host B took over, reconciled
    /// (nothing published) and published; A wakes up fenced out.
    #[test]
    fn a_run_that_lost_its_lease_to_a_takeover_cannot_publish() {
        let s = Standard::new("ss_fence_ch");
        let fx = &s.fx;
        let state = StateDb::new();
        let (a, b) = hosts(fx, &state);
        let doc = take_over(&a, &b);
        assert_same_rows(&s.expected, &fx.target_rows(), "the target is B's one publication");
        let backup = fx.assert_clean_after_success("after A woke up").expect("a backup");
        assert_same_rows(&s.before, &fx.table_rows(&backup), "one EXCHANGE only");
        let seen = b.status();
        assert_eq!(state_of(&seen), "succeeded", "{seen:#}");
        assert_eq!(seen["run_id"], doc["run_id"]);
        state.drop();
        s.finish();
    }
}

mod clickhouse_to_postgres {
    use super::*;
    use ch_postgres_common::{TS, expected_after_replace, standard_fixture, standard_source};

    /// The same takeover into a PostgreSQL target: A is fenced out, the
    /// target holds B's one publication (one receipt).
    #[test]
    fn a_run_that_lost_its_lease_to_a_takeover_cannot_publish() {
        let fx = standard_fixture("ss_fence_pg");
        let state = StateDb::new();
        let (a, b) = hosts(&fx.manifest, fx.dir(), &state, &fx.clickhouse_url);
        let expected = expected_after_replace(&ch_postgres_common::standard_target(), &standard_source(), TS);
        take_over(&a, &b);
        fx.assert_target(&expected, "the target is B's one publication");
        assert_eq!(fx.receipts().len(), 1, "one publishing transaction: {:?}", fx.receipts());
        assert!(fx.leftovers().is_empty(), "{:?}", fx.leftovers());
        assert_eq!(state_of(&a.status()), "succeeded");
        state.drop();
        fx.finish();
    }
}

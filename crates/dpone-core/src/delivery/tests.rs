use super::*;
use crate::types::{ColumnType, DType};

fn columns(extra: bool) -> Vec<Column> {
    let col = |name: &str, dtype: DType| Column { name: name.into(), ty: ColumnType::new(dtype, false), native_type: String::new() };
    let mut c = vec![col("id", DType::Int64), col("ts", DType::DateTime64 { precision: 6, tz: Some("UTC".into()) })];
    if extra {
        c.push(col("note", DType::String));
    }
    c
}

fn key() -> ChunkKey {
    ChunkKey::new(
        "clickhouse:db.events",
        "ts",
        Timestamp(86_400_000_000),
        Timestamp(2 * 86_400_000_000),
        &columns(false),
        "postgres.mvcc.v2",
    )
}

fn fingerprint(rows: u64) -> Fingerprint {
    Fingerprint::new(rows, format!("d{rows}"))
}

fn identity(chunk: &str) -> TargetIdentity {
    TargetIdentity { incarnation: "uuid-1".into(), chunk: chunk.into(), parts: None }
}

fn record() -> String {
    ChunkRecord::new(key(), fingerprint(10), identity("parts-a"), "run-1", None).body()
}

/// The decision with the stored record `body`, the source at `fp` and the
/// target at `chunk`.
fn decide_with(body: Option<&str>, fp: Result<&Fingerprint, ()>, chunk: &str) -> Decision {
    let k = key();
    decide(Evidence { key: &k, stored: body, fingerprint: fp }, &identity(chunk))
}

#[test]
fn a_chunk_is_unchanged_only_when_record_source_and_target_all_agree() {
    let body = record();
    assert_eq!(decide_with(Some(&body), Ok(&fingerprint(10)), "parts-a"), Decision::Unchanged);
    assert!(!Decision::Unchanged.transfers());
    // A late row, a delete or a correction changes the fingerprint.
    assert_eq!(decide_with(Some(&body), Ok(&fingerprint(11)), "parts-a"), Decision::Changed);
    let corrected = Fingerprint::new(10, "other");
    assert_eq!(decide_with(Some(&body), Ok(&corrected), "parts-a"), Decision::Changed);
    // Another writer changed the target's rows of the chunk.
    assert_eq!(decide_with(Some(&body), Ok(&fingerprint(10)), "parts-b"), Decision::TargetChanged);
    assert_eq!(decide_with(Some(&body), Err(()), "parts-a"), Decision::FingerprintError);
    assert_eq!(decide_with(None, Ok(&fingerprint(10)), "parts-a"), Decision::NoRecord);
    for d in [Decision::Changed, Decision::TargetChanged, Decision::FingerprintError, Decision::NoRecord, Decision::RecordInvalid] {
        assert!(d.transfers(), "{d:?}");
    }
}

#[test]
fn a_record_of_another_key_or_incarnation_is_no_record() {
    let fp = fingerprint(10);
    let id = identity("parts-a");
    let other = |k: ChunkKey, incarnation: &str| {
        let body = ChunkRecord::new(k, fp.clone(), TargetIdentity { incarnation: incarnation.into(), ..id.clone() }, "run-1", None).body();
        decide(Evidence { key: &key(), stored: Some(&body), fingerprint: Ok(&fp) }, &id)
    };
    assert_eq!(other(key(), "uuid-1"), Decision::Unchanged);
    // A column added on both sides: every chunk moves.
    let widened = ChunkKey { columns: columns_digest(&columns(true)), ..key() };
    assert_eq!(other(widened, "uuid-1"), Decision::NoRecord);
    assert_eq!(other(ChunkKey { end: key().end + 1, ..key() }, "uuid-1"), Decision::NoRecord);
    assert_eq!(other(ChunkKey { authority: "postgres.content.v1".into(), ..key() }, "uuid-1"), Decision::NoRecord);
    // The target was recreated or exchanged by someone else.
    assert_eq!(other(key(), "uuid-2"), Decision::NoRecord);
}

/// A record edited or truncated is never trusted: the chunk is transferred.
#[test]
fn a_tampered_record_transfers_the_chunk() {
    let (k, id, fp) = (key(), identity("parts-a"), fingerprint(10));
    let body = record();
    let check = |stored: Option<&str>, fp: &Fingerprint| decide(Evidence { key: &k, stored, fingerprint: Ok(fp) }, &id);
    // The fingerprint rewritten to match a changed source, checksum kept.
    let forged = body.replace("\"d10\"", "\"d11\"");
    assert_ne!(forged, body);
    assert_eq!(check(Some(&forged), &fingerprint(11)), Decision::RecordInvalid);
    assert_eq!(check(Some(&body[..body.len() - 2]), &fp), Decision::RecordInvalid);
    assert_eq!(check(Some("not json"), &fp), Decision::RecordInvalid);
    assert_eq!(check(Some(&body), &fp), Decision::Unchanged);
    // The target's identity is only read for a candidate.
    assert_eq!(candidate(Evidence { key: &k, stored: Some(&forged), fingerprint: Ok(&fp) }), Err(Decision::RecordInvalid));
    assert!(candidate(Evidence { key: &k, stored: Some(&body), fingerprint: Ok(&fp) }).is_ok());
}

#[test]
fn decisions_summarise_and_name_their_carried_ranges() {
    let chunk = |index: u32, decision: Decision| ChunkDelivery {
        index,
        start: Timestamp(index as i64 * 10),
        end: Timestamp(index as i64 * 10 + 10),
        decision,
        fingerprint: None,
        carried: None,
        carried_parts: None,
        published_parts: None,
    };
    let d = DeliveryDecisions {
        authority: "postgres.mvcc.v2".into(),
        chunks: vec![chunk(0, Decision::Unchanged), chunk(1, Decision::Changed), chunk(2, Decision::Unchanged)],
        source_pass: None,
        fingerprints_by: None,
        audit: None,
        settled: None,
    };
    assert_eq!(d.summary(), "unchanged: 2, changed: 1");
    assert_eq!(d.carried_ranges(), vec![(Timestamp(0), Timestamp(10)), (Timestamp(20), Timestamp(30))]);
    assert!(d.is_carried(2) && !d.is_carried(1));
}

#[test]
fn the_store_key_names_the_target_column_and_bounds() {
    assert_eq!(key().store_key(), "chunks/clickhouse:db.events/ts/86400000000/172800000000");
    assert_ne!(columns_digest(&columns(false)), columns_digest(&columns(true)));
    let parsed = ChunkRecord::parse(&record()).unwrap();
    assert_eq!((parsed.run_id.as_str(), parsed.source.rows), ("run-1", 10));
}

fn pass(snapshot: &str) -> SourcePass {
    SourcePass { snapshot: snapshot.into(), writes: Some("16384:7".into()), relations: Some("16384,16390".into()) }
}

/// The key of day `i` of a window of daily chunks.
fn day_key(i: i64) -> ChunkKey {
    let day = 86_400_000_000;
    ChunkKey::new("clickhouse:db.events", "ts", Timestamp(i * day), Timestamp((i + 1) * day), &columns(false), "postgres.mvcc.v2")
}

#[test]
fn a_window_is_expected_as_a_whole_only_from_valid_records_of_one_pass() {
    let keys: Vec<ChunkKey> = (0..3).map(day_key).collect();
    let stored = |passes: [Option<&str>; 3]| -> std::collections::BTreeMap<String, String> {
        keys.iter()
            .zip(passes)
            .zip(10..)
            .map(|((k, p), rows)| {
                (k.store_key(), ChunkRecord::new(k.clone(), fingerprint(rows), identity("a"), "run-1", p.map(pass)).body())
            })
            .collect()
    };
    let expected = |store: &std::collections::BTreeMap<String, String>| expected_window(&keys, |k| store.get(&k.store_key()).cloned());
    let one = stored([Some("10:20:"), Some("10:20:"), Some("10:20:")]);
    let e = expected(&one).expect("three records of one pass");
    assert_eq!(e.pass, pass("10:20:"));
    assert_eq!(e.chunks, vec![fingerprint(10), fingerprint(11), fingerprint(12)]);
    // Records of two passes could cancel out in a sum: never as a whole.
    assert_eq!(expected(&stored([Some("10:20:"), Some("11:21:"), Some("10:20:")])), None);
    // A record written before passes were kept, one missing, one tampered.
    assert_eq!(expected(&stored([Some("10:20:"), None, Some("10:20:")])), None);
    let mut missing = one.clone();
    missing.remove(&keys[1].store_key());
    assert_eq!(expected(&missing), None);
    let mut tampered = one.clone();
    let body = tampered.get(&keys[2].store_key()).unwrap().replace("\"rows\":12", "\"rows\":13");
    assert_ne!(&body, tampered.get(&keys[2].store_key()).unwrap(), "the edit applies");
    tampered.insert(keys[2].store_key(), body);
    assert_eq!(expected(&tampered), None);
    // A record of another key (e.g. another column list) under the chunk's store key.
    let mut other = one.clone();
    let k = ChunkKey::new("clickhouse:db.events", "ts", Timestamp(0), Timestamp(86_400_000_000), &columns(true), "postgres.mvcc.v2");
    other.insert(keys[0].store_key(), ChunkRecord::new(k, fingerprint(10), identity("a"), "run-1", Some(pass("10:20:"))).body());
    assert_eq!(expected(&other), None);
}

#[test]
fn a_records_pass_is_under_its_checksum_and_older_records_keep_theirs() {
    let with = ChunkRecord::new(key(), fingerprint(10), identity("a"), "run-1", Some(pass("10:20:")));
    assert!(ChunkRecord::parse(&with.body()).is_some());
    let edited = with.body().replace("10:20:", "10:21:");
    assert_eq!(ChunkRecord::parse(&edited), None, "the pass is checksummed");
    let edited = with.body().replace("16384,16390", "16384,16391");
    assert_ne!(edited, with.body());
    assert_eq!(ChunkRecord::parse(&edited), None, "its relations too");
    // A pass as written before its relations were kept (no field) still parses.
    let unnamed = ChunkRecord::new(key(), fingerprint(10), identity("a"), "run-1", Some(SourcePass { relations: None, ..pass("10:20:") }));
    assert!(!unnamed.body().contains("relations"));
    assert_eq!(ChunkRecord::parse(&unnamed.body()).unwrap().source_pass.unwrap().relations, None);
    // A record as written before passes existed (no field) still parses.
    let old = ChunkRecord::new(key(), fingerprint(10), identity("a"), "run-1", None).body();
    assert!(!old.contains("source_pass"));
    assert_eq!(ChunkRecord::parse(&old).unwrap().source_pass, None);
}

/// When a run audits the chunks it would carry (issue 43): every run, every
/// n-th run since the last audit, or once the window's end moved by the
/// duration; a target never audited is audited by every policy but `never`.
#[test]
fn an_audit_is_due_by_its_policy_and_the_last_audit() {
    use crate::time::FixedDuration;
    let day = crate::time::MICROS_PER_DAY;
    let mark = |last_end: i64, runs_since: u32| AuditMark { last_end, runs_since };
    let end = Timestamp(10 * day);
    assert_eq!(AuditPolicy::Never.due(None, end), None);
    assert_eq!(AuditPolicy::Never.due(Some(&mark(0, 99)), end), None);
    assert_eq!(AuditPolicy::EveryRun.due(Some(&mark(10 * day, 0)), end), Some("every_run"));
    assert_eq!(AuditPolicy::EveryRuns(3).due(None, end), Some("first"));
    assert_eq!(AuditPolicy::EveryRuns(3).due(Some(&mark(0, 1)), end), None);
    assert_eq!(AuditPolicy::EveryRuns(3).due(Some(&mark(0, 2)), end), Some("every_runs"));
    let weekly = AuditPolicy::Every(FixedDuration(7 * day));
    assert_eq!(weekly, AuditPolicy::default());
    assert_eq!(weekly.due(Some(&mark(4 * day, 30)), end), None, "6 days of window end since the last audit");
    assert_eq!(weekly.due(Some(&mark(3 * day, 0)), end), Some("every_duration"));
    assert_eq!(weekly.due(Some(&mark(12 * day, 0)), end), None, "an older window rerun");
    assert_eq!(audit_key("clickhouse:db.t", "ts"), "audits/clickhouse:db.t/ts");
    assert_eq!(weekly.to_string(), "every P7D of window end");
}

/// The end of a run adds up only when staged + carried = the window and
/// no carried chunk changed; an identity names its rows.
#[test]
fn a_settled_window_holds_only_when_it_adds_up() {
    let s = Settled {
        staged_rows: 3,
        carried_rows: 7,
        target_window_rows: 10,
        carried_by_parts: 2,
        carried_by_digest: 0,
        carried_by_publication: 0,
        changed: vec![],
    };
    assert!(s.holds());
    assert!(!Settled { target_window_rows: 11, ..s.clone() }.holds());
    assert!(!Settled { changed: vec![4], ..s.clone() }.holds());
    assert!(!Settled { staged_rows: u64::MAX, ..s.clone() }.holds());
    assert_eq!(identity("12:abc:[0]").rows(), Some(12));
    assert_eq!(identity("parts-a").rows(), None);
    for d in [Decision::NoAuthority, Decision::Forced, Decision::CarryCostly, Decision::AuditMismatch] {
        assert!(d.transfers(), "{d:?}");
    }
}

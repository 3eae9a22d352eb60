//! Durable run state: leases, fenced compare-and-swap records, the run
//! journal and its state machine.
//!
//! # Contract of a [`StateStore`]
//!
//! - A lease covers one *scope* (a target table). `acquire` succeeds when
//!   nobody holds the scope or the holder's lease expired, and every
//!   successful acquire increments the scope's **fence**. A holder keeps the
//!   lease alive with `renew`; a renewal or a write by a holder whose fence
//!   is no longer current fails with [`StoreError::LeaseLost`].
//! - A record is saved only by `compare_and_set`, which checks in one
//!   transaction that the caller holds the scope's current lease (holder,
//!   fence, not expired) and that the record's revision is the expected one
//!   (`None` = the record must not exist). Each save increments the revision.
//! - Reads need no lease.
//!
//! Modelled on Materialize's persist `Consensus`: the store is the single
//! authority on "who may write" and "what was written last"; a process that
//! lost either learns it at its next write, never later.

use crate::digest::RowDigest;
use crate::ports::{PublicationOutcome, SourceVersion};
use crate::publication::Publication;
use crate::time::Timestamp;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Version of the serialized run journal.
pub const JOURNAL_VERSION: &str = "dpone.run_journal.v1";
/// Lease time to live and renewal period (SPEC §4).
pub const LEASE_TTL_MS: u64 = 60_000;
pub const LEASE_RENEW_MS: u64 = 20_000;
/// Rows between lease checks inside a chunk stream.
pub const LEASE_CHECK_ROWS: u64 = 1024;
/// Attempts per chunk, and the backoff before the second and third.
pub const MAX_CHUNK_ATTEMPTS: u32 = 3;
pub const CHUNK_BACKOFF_MS: [u64; 2] = [100, 200];

/// A held lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    pub scope: String,
    pub holder: String,
    pub fence: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("scope `{scope}` is held by {holder} (lease valid for another {remaining_ms} ms)")]
    Held { scope: String, holder: String, remaining_ms: u64 },
    #[error("the lease on `{0}` was lost: another process acquired it or it expired")]
    LeaseLost(String),
    #[error("record `{key}` changed concurrently: expected revision {expected:?}, found {found:?}")]
    Conflict { key: String, expected: Option<u64>, found: Option<u64> },
    #[error("state store error: {0}")]
    Io(String),
}

/// A stored record and its revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned {
    pub revision: u64,
    pub body: String,
}

/// Durable leases and records. Implementations must pass the conformance
/// suite in `dpone-testkit`.
pub trait StateStore: Send + Sync {
    fn acquire(&self, scope: &str, holder: &str, ttl_ms: u64) -> Result<Lease, StoreError>;
    /// Acquires `scope` even though its lease is live, but only while it is
    /// still held by `stale_holder` (a holder the caller proved dead, e.g. a
    /// crashed process on this host). The fence grows as on `acquire`.
    fn take_over(&self, scope: &str, stale_holder: &str, holder: &str, ttl_ms: u64) -> Result<Lease, StoreError>;
    fn renew(&self, lease: &Lease, ttl_ms: u64) -> Result<(), StoreError>;
    fn release(&self, lease: &Lease) -> Result<(), StoreError>;
    fn get(&self, key: &str) -> Result<Option<Versioned>, StoreError>;
    /// Saves `body` under `key` if `lease` is current and the revision is
    /// `expected`; returns the new revision.
    fn compare_and_set(&self, lease: &Lease, key: &str, expected: Option<u64>, body: &str) -> Result<u64, StoreError>;
    /// Keys starting with `prefix`, for status listings.
    fn keys(&self, prefix: &str) -> Result<Vec<String>, StoreError>;
}

/// States of a run (SPEC §4 vocabulary).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunState {
    Planned,
    Staging,
    /// Every chunk is staged and verified (stage complete): from here on the
    /// run finishes from the target alone, without reading the source.
    Verified,
    Publishing,
    Published,
    EvidenceComplete,
    Succeeded,
    Failed,
    OutcomeUnknown,
}

impl RunState {
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Planned => "planned",
            RunState::Staging => "staging",
            RunState::Verified => "verified",
            RunState::Publishing => "publishing",
            RunState::Published => "published",
            RunState::EvidenceComplete => "evidence-complete",
            RunState::Succeeded => "succeeded",
            RunState::Failed => "failed",
            RunState::OutcomeUnknown => "outcome-unknown",
        }
    }

    /// Whether the next invocation may continue this run.
    pub fn is_resumable(self) -> bool {
        matches!(
            self,
            RunState::Planned
                | RunState::Staging
                | RunState::Verified
                | RunState::Publishing
                | RunState::Published
                | RunState::EvidenceComplete
        )
    }

    /// Whether the new data is (or may be) visible.
    pub fn past_publication(self) -> bool {
        matches!(self, RunState::Published | RunState::EvidenceComplete | RunState::Succeeded)
    }

    /// [`RunState::can_become`], for a journal whose intent is (`direct`)
    /// or is not a direct publication's: a direct publication goes from
    /// staging to publishing, its chunks being loaded inside the
    /// publishing transaction (no staging survives it to be `verified`).
    pub fn can_become_with(self, next: RunState, direct: bool) -> bool {
        self.can_become(next) || (direct && self == RunState::Staging && next == RunState::Publishing)
    }

    /// [`RunState::can_become_with`] for the journal `next` is the state
    /// of: a run that publishes nothing ([`RunJournal::publishes_nothing`])
    /// goes from verified straight to published, with no intent to judge.
    pub fn can_become_in(self, next: &RunJournal) -> bool {
        let direct = next.intent.as_ref().is_some_and(|i| i.is_direct());
        self.can_become_with(next.state, direct)
            || (next.publishes_nothing() && self == RunState::Verified && next.state == RunState::Published)
    }

    /// Allowed transitions; anything else is a bug the journal refuses.
    pub fn can_become(self, next: RunState) -> bool {
        use RunState::*;
        matches!(
            (self, next),
            (Planned, Staging)
                | (Staging, Staging)
                | (Staging, Verified)
                | (Verified, Publishing)
                | (Publishing, Published)
                | (Published, EvidenceComplete)
                | (EvidenceComplete, Succeeded)
                | (Planned | Staging | Verified | Publishing, Failed)
                | (Publishing, OutcomeUnknown)
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChunkState {
    Staging,
    Verified,
    Failed,
}

/// Journal entry of one chunk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChunkRecord {
    pub index: u32,
    pub chunk_id: String,
    pub state: ChunkState,
    pub attempt: u32,
    pub staging_table: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub start: Option<Timestamp>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub end: Option<Timestamp>,
    pub rows: u64,
    pub encoded_bytes: u64,
    /// Hex of the digest sum, and NULL counts (the staged digest: what the
    /// target stores, computed by the target).
    pub digest_sum: String,
    pub null_counts: Vec<u64>,
    /// Hex of the digest sum of the stream that was sent (computed by the
    /// source). Verification requires it to equal the staged digest; both
    /// are kept so evidence shows two independent computations.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub stream_digest_sum: Option<String>,
    /// The stream's NULL counts per column (computed by the source), kept
    /// apart from the staged ones for the same reason. None in journals
    /// written before they were recorded: the stream's digest is then
    /// unknown, never borrowed from the staged one.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub stream_null_counts: Option<Vec<u64>>,
    /// The staging table's parts by identity, read before and after its
    /// digest and equal both times: the parts that digest verified. None
    /// when the target cannot identify parts or they changed meanwhile
    /// (the generation is then verified by digest).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub parts: Option<Vec<crate::ports::PartIdentity>>,
    pub seconds: f64,
}

impl ChunkRecord {
    /// The record of an attempt that is being staged (nothing verified yet).
    pub fn staging(index: u32, attempt: u32, staging_table: &str, chunk: Option<crate::window::Chunk>) -> Self {
        ChunkRecord {
            index,
            chunk_id: String::new(),
            state: ChunkState::Staging,
            attempt,
            staging_table: staging_table.to_string(),
            start: chunk.map(|c| c.start),
            end: chunk.map(|c| c.end),
            rows: 0,
            encoded_bytes: 0,
            digest_sum: String::new(),
            null_counts: Vec::new(),
            stream_digest_sum: None,
            stream_null_counts: None,
            parts: None,
            seconds: 0.0,
        }
    }

    pub fn digest(&self) -> Option<RowDigest> {
        digest_from(self.rows, &self.digest_sum, &self.null_counts)
    }

    /// The stream's digest, as the source computed it: None when the
    /// journal does not hold both its sum and its NULL counts.
    pub fn stream_digest(&self) -> Option<RowDigest> {
        digest_from(self.rows, self.stream_digest_sum.as_deref()?, self.stream_null_counts.as_deref()?)
    }
}

/// Rebuilds a digest from its journal form.
/// The stored sum names its algorithm ([`RowDigest::sum_hex`]).
pub fn digest_from(rows: u64, sum_hex: &str, null_counts: &[u64]) -> Option<RowDigest> {
    let (algorithm, sum) = RowDigest::parse_sum_hex(sum_hex)?;
    Some(RowDigest { rows, sum, null_counts: null_counts.to_vec(), algorithm })
}

/// The durable intent written before the one publishing step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "IntentRecord", into = "IntentRecord")]
pub struct PublicationIntent {
    pub generation_table: String,
    pub backup_table: String,
    /// The target's identity before publication (ClickHouse: table UUID).
    pub target_before: String,
    /// The generation's identity (what the target becomes when published).
    pub generation: String,
    /// How the run publishes. A journal written before it was recorded
    /// says `direct: true` for a direct publication (read as
    /// [`Publication::Direct`]) and nothing for the others (None: the
    /// plan's, which the manifest fingerprint of a resumed run fixes).
    pub publication: Option<Publication>,
}

impl PublicationIntent {
    /// A direct publication (`postgres.publication: direct`): the chunks
    /// were loaded inside the publishing transaction itself, so there is no
    /// generation to publish again if it did not commit.
    pub fn is_direct(&self) -> bool {
        self.publication == Some(Publication::Direct)
    }
}

/// A [`PublicationIntent`] as journals hold it, old or new. `direct` is
/// still written, so that a host of the previous version sharing the state
/// store reads a direct intent as one.
#[derive(Serialize, Deserialize)]
struct IntentRecord {
    generation_table: String,
    backup_table: String,
    target_before: String,
    generation: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    publication: Option<Publication>,
    /// A direct publication (all that journals said before `publication`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    direct: bool,
}

impl From<PublicationIntent> for IntentRecord {
    fn from(i: PublicationIntent) -> Self {
        IntentRecord {
            direct: i.is_direct(),
            generation_table: i.generation_table,
            backup_table: i.backup_table,
            target_before: i.target_before,
            generation: i.generation,
            publication: i.publication,
        }
    }
}

impl From<IntentRecord> for PublicationIntent {
    fn from(r: IntentRecord) -> Self {
        PublicationIntent {
            generation_table: r.generation_table,
            backup_table: r.backup_table,
            target_before: r.target_before,
            generation: r.generation,
            publication: r.publication.or(r.direct.then_some(Publication::Direct)),
        }
    }
}

/// The run journal: everything recovery needs, keyed by invocation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunJournal {
    pub journal_version: String,
    /// Target scope + window + manifest identity (what was asked).
    pub invocation: String,
    /// Counts re-executions of a succeeded invocation.
    pub execution: u32,
    pub run_id: String,
    /// Random per execution: with the run id it names every owned table,
    /// so two executions of one run id (from two work dirs or hosts) never
    /// share a name. Empty in journals written before tokens existed.
    #[serde(default)]
    pub token: String,
    pub state: RunState,
    pub manifest_fingerprint: String,
    pub route: String,
    pub target: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub window_start: Option<Timestamp>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub window_end: Option<Timestamp>,
    pub chunk_count: u32,
    /// `incremental_append`: the batch (old mark, snapshot maximum), fixed
    /// before any read; a resumed run reads or finishes exactly this batch.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub cursor: Option<crate::incremental::CursorBatch>,
    pub schema_fingerprint: String,
    pub source_version: SourceVersion,
    /// Resolved limits as stored; a resumed run must present the same.
    pub limits: serde_json::Value,
    pub chunks: BTreeMap<u32, ChunkRecord>,
    /// Every table this run created or was about to create (recorded before
    /// creation), so cleanup never misses one and never touches another's.
    #[serde(default)]
    pub owned: std::collections::BTreeSet<String>,
    /// `delivery: changed`: each chunk's decision, taken before any chunk
    /// was staged; a resumed run keeps them.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub delivery: Option<crate::delivery::DeliveryDecisions>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub generation: Option<GenerationRecord>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub intent: Option<PublicationIntent>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub publication: Option<PublicationOutcome>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub evidence_path: Option<String>,
    /// The evidence document's record in the state store (readable from
    /// any host that reaches the store, unlike `evidence_path`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub evidence_key: Option<String>,
    /// Target rows with a NULL window value after publication (from the
    /// evidence), for the report of a run finished by a later invocation.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub null_window_rows: Option<u64>,
    /// The reconciliation of concurrent writes after a replace's
    /// publication, once complete (the backup may be dropped only then).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub reconciliation: Option<crate::ports::Reconciliation>,
    /// Target rows after an append's publication (from the evidence).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub final_rows: Option<u64>,
    /// An incremental run into a target that counts rows only by reading
    /// them all (`Target::counts_rows_cheaply`): its total was not counted,
    /// and the report says so (`final_rows: null`).
    #[serde(skip_serializing_if = "std::ops::Not::not", default)]
    pub target_uncounted: bool,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub error: Option<JournalError>,
    /// Holder of the lease of the last write (for status output).
    pub last_holder: String,
}

/// The verified generation, as needed to finish a run after a crash.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenerationRecord {
    pub table: String,
    pub rows: u64,
    pub digest_sum: String,
    pub null_counts: Vec<u64>,
    pub kept_rows: u64,
    pub kept_digest_sum: String,
    pub kept_null_counts: Vec<u64>,
    pub replaced_rows: u64,
    pub unchanged: bool,
    /// How the generation was verified (stored as `digest`,
    /// `counts_kept_digest_linked_chunks` or `counts_view_of_verified_chunks`).
    pub check: crate::evidence::GenerationCheck,
    /// The generation holds only the window's rows; the kept rows stay in
    /// the target (`rows` and the digest then cover the window only).
    #[serde(default)]
    pub in_place: bool,
    /// A partition-linked build's report. Then `digest_sum` covers the
    /// window's rows and `kept_digest_sum` the copied kept rows only.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub link: Option<crate::ports::LinkReport>,
    /// Seconds the build and its verification took.
    #[serde(default)]
    pub build_seconds: f64,
    /// `incremental_merge`: the rows the publication inserts (one per key
    /// of the batch); `replaced_rows` then counts the target rows whose key
    /// is in the batch.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub merged_rows: Option<u64>,
    /// The target's evidence facts as the publishing transaction itself
    /// counted them (a direct publication, from its read-backs and a count
    /// of the rows outside the window under its lock), so that evidence
    /// does not scan the target again. None: the evidence step reads them.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub target_stats: Option<crate::ports::WindowStats>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalError {
    pub code: String,
    pub message: String,
}

impl RunJournal {
    pub fn key(invocation: &str) -> String {
        format!("run/{invocation}")
    }

    /// Every chunk of a `delivery: changed` window was carried: no intent,
    /// and a generation of nothing verified as
    /// [`crate::evidence::GenerationCheck::NothingToPublish`].
    pub fn publishes_nothing(&self) -> bool {
        self.intent.is_none()
            && self.chunks.is_empty()
            && self.generation.as_ref().is_some_and(|g| g.check == crate::evidence::GenerationCheck::NothingToPublish)
    }

    /// Key of this execution's evidence record in the state store.
    pub fn evidence_key(&self) -> String {
        format!("evidence/{}/{}-{:04}", self.invocation, self.run_id, self.execution)
    }

    /// What this execution's owned names start with.
    pub fn stem(&self) -> String {
        crate::identity::owned_stem(&self.run_id, &self.token)
    }

    pub fn verified_chunks(&self) -> usize {
        self.chunks.values().filter(|c| c.state == ChunkState::Verified).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A journal written before the intent recorded its publication still
    /// resumes: `direct: true` is a direct publication, nothing is the plan's.
    #[test]
    fn intents_of_earlier_journals_are_read() {
        let old = r#"{"generation_table":"g","backup_table":"b","target_before":"t0","generation":"t1","direct":true}"#;
        let intent: PublicationIntent = serde_json::from_str(old).unwrap();
        assert!(intent.is_direct());
        let old = r#"{"generation_table":"g","backup_table":"b","target_before":"t0","generation":"t1"}"#;
        let intent: PublicationIntent = serde_json::from_str(old).unwrap();
        assert_eq!(intent.publication, None);
        let new = PublicationIntent { publication: Some(Publication::Append), ..intent };
        let text = serde_json::to_string(&new).unwrap();
        assert!(text.ends_with(r#""publication":{"kind":"append"}}"#), "{text}");
        assert_eq!(serde_json::from_str::<PublicationIntent>(&text).unwrap(), new);
        // A direct intent still says `direct` for hosts of the previous version.
        let direct = PublicationIntent { publication: Some(Publication::Direct), ..new };
        let text = serde_json::to_string(&direct).unwrap();
        assert!(text.ends_with(r#""publication":{"kind":"direct"},"direct":true}"#), "{text}");
        assert_eq!(serde_json::from_str::<PublicationIntent>(&text).unwrap(), direct);
    }

    /// The stream's digest is the source's own record: its NULL counts are
    /// not the staged ones, and a journal without them has no stream digest.
    #[test]
    fn the_stream_digest_is_recorded_apart_from_the_staged_one() {
        let mut staged = RowDigest::new(2);
        staged.add_row(b"row");
        staged.rows = 1;
        let mut stream = staged.clone();
        stream.add_null(1);
        let mut c = ChunkRecord::staging(0, 1, "stg", None);
        c.rows = 1;
        c.digest_sum = staged.sum_hex();
        c.null_counts = staged.null_counts.clone();
        c.stream_digest_sum = Some(stream.sum_hex());
        assert_eq!(c.stream_digest(), None, "no stream NULL counts: unknown, not the staged ones");
        c.stream_null_counts = Some(stream.null_counts.clone());
        let (shown, kept) = (c.stream_digest().unwrap(), c.digest().unwrap());
        assert_eq!(shown.null_counts, vec![0, 1], "the stream's own counts");
        assert_ne!(shown, kept, "a stream that differs from the staged rows shows the difference");
        let evidence = crate::evidence::ChunkEvidence {
            chunk_id: "c".into(),
            index: 0,
            attempt: 1,
            start: None,
            end: None,
            staging_table: "stg".into(),
            rows: 1,
            encoded_bytes: 3,
            stream_digest: c.stream_digest(),
            staged_digest: kept,
            seconds: 0.0,
        };
        let v = serde_json::to_value(&evidence).unwrap();
        assert_ne!(v["stream_digest"], v["staged_digest"]);
        assert_eq!(v["stream_digest"]["null_counts"], serde_json::json!([0, 1]));
        // A journal written before the stream's counts were recorded.
        let mut old = serde_json::to_value(&c).unwrap();
        old.as_object_mut().unwrap().remove("stream_null_counts");
        let old: ChunkRecord = serde_json::from_value(old).unwrap();
        let v = serde_json::to_value(crate::evidence::ChunkEvidence { stream_digest: old.stream_digest(), ..evidence }).unwrap();
        assert!(v["stream_digest"].is_null(), "unknown, shown as null: {v}");
    }

    /// A journal in `state`, with a generation verified by `check` and,
    /// if `intent`, a publication intent.
    fn journal_with(state: RunState, check: &str, intent: bool) -> RunJournal {
        let mut j = serde_json::json!({
            "journal_version": "1", "invocation": "i", "execution": 1, "run_id": "r", "state": state,
            "manifest_fingerprint": "m", "route": "postgres->clickhouse", "target": "t", "chunk_count": 30,
            "schema_fingerprint": "s", "source_version": {"id": "v", "durable": true}, "limits": {}, "chunks": {},
            "last_holder": "h",
            "generation": {"table": "", "rows": 0, "digest_sum": "0", "null_counts": [], "kept_rows": 0, "kept_digest_sum": "0",
                "kept_null_counts": [], "replaced_rows": 0, "unchanged": true, "check": check, "in_place": true, "link": null,
                "build_seconds": 0.0, "merged_rows": null, "target_stats": null}
        });
        if intent {
            j["intent"] = serde_json::json!({"generation_table": "g", "backup_table": "b", "target_before": "x", "generation": "y"});
        }
        serde_json::from_value(j).expect("a journal")
    }

    #[test]
    fn only_a_run_that_publishes_nothing_goes_from_verified_to_published() {
        use RunState::*;
        let nothing = journal_with(Published, "nothing_to_publish", false);
        assert!(nothing.publishes_nothing() && Verified.can_become_in(&nothing));
        assert!(!Staging.can_become_in(&nothing), "staged chunks are verified first");
        // Any publication of rows passes through publishing and its intent.
        for (check, intent) in [("nothing_to_publish", true), ("counts_view_of_verified_chunks", false), ("digest", true)] {
            let j = journal_with(Published, check, intent);
            assert!(!j.publishes_nothing() && !Verified.can_become_in(&j), "{check}, intent {intent}");
        }
        assert!(Verified.can_become_in(&journal_with(Publishing, "digest", true)));
    }

    #[test]
    fn transitions() {
        use RunState::*;
        assert!(Planned.can_become(Staging));
        assert!(Publishing.can_become(OutcomeUnknown));
        assert!(Staging.can_become(Verified) && Verified.can_become(Publishing));
        assert!(!Staging.can_become(Publishing), "publishing needs every chunk verified first");
        assert!(!Staging.can_become_with(Publishing, false));
        assert!(Staging.can_become_with(Publishing, true), "a direct publication verifies its chunks inside its transaction");
        assert!(!Planned.can_become_with(Publishing, true) && !Verified.can_become_with(Staging, true));
        assert!(!Published.can_become(Failed), "after publication a run can only complete");
        assert!(!Succeeded.can_become(Staging));
        assert!(!OutcomeUnknown.can_become(Published), "unknown is resolved by an operator, not by the run");
        assert!(!Verified.can_become(Published), "published needs a publication");
        assert_eq!(serde_json::to_string(&EvidenceComplete).unwrap(), "\"evidence-complete\"");
    }
}

//! Changed-window delivery (docs/changed-delivery.md): the records of a
//! target's last verified publication per chunk and the decision whether a
//! chunk of a new run must be transferred. Pure: the fingerprints and the
//! target identities are read by the adapters, the records kept by the
//! state store; this module only compares them.
//!
//! A chunk is `Unchanged` only when a valid record of the same key exists,
//! the source's fingerprint equals the record's and the target's chunk
//! identity (its rows' count and digest) equals the record's. Every other
//! outcome transfers the chunk: a doubt costs a transfer, never a skipped
//! change.

use crate::time::Timestamp;
use crate::types::Column;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// `sink.strategy.window.delivery`: which chunks of a window a run moves.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Delivery {
    /// Every chunk is staged, verified and published (the default).
    #[default]
    All,
    /// Only chunks that may have changed since the target's last verified
    /// publication; the others are carried from the target.
    Changed,
}

/// `sink.strategy.window.audit`: when a `delivery: changed` run checks the
/// chunks its authority would carry against a content digest that both
/// servers compute (docs/audit.md), which trusts no authority. A chunk
/// whose digests differ is transferred (`audit_mismatch`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuditPolicy {
    Never,
    EveryRun,
    /// Every `n`-th run since the last audit.
    EveryRuns(u32),
    /// When the window's end has moved by at least this much since the
    /// last audit (anchored like the window: no wall clock).
    Every(crate::time::FixedDuration),
}

/// The default: a weekly audit of nightly windows.
pub const DEFAULT_AUDIT: AuditPolicy = AuditPolicy::Every(crate::time::FixedDuration(7 * crate::time::MICROS_PER_DAY));

impl Default for AuditPolicy {
    fn default() -> Self {
        DEFAULT_AUDIT
    }
}

impl std::fmt::Display for AuditPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AuditPolicy::Never => f.write_str("never"),
            AuditPolicy::EveryRun => f.write_str("every_run"),
            AuditPolicy::EveryRuns(n) => write!(f, "every {n} runs"),
            AuditPolicy::Every(d) => write!(f, "every {d} of window end"),
        }
    }
}

impl Serialize for AuditPolicy {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// The state store record of a target's last content audit, kept under
/// [`audit_key`] and written with the chunk records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditMark {
    /// The window end (microseconds) of the last run whose carried chunks
    /// were audited, or that carried none (every chunk verified by staging).
    pub last_end: i64,
    /// Published runs since then that carried chunks without an audit.
    pub runs_since: u32,
}

/// The state store key of a target's [`AuditMark`] for `column`.
pub fn audit_key(target_scope: &str, column: &str) -> String {
    format!("audits/{target_scope}/{column}")
}

impl AuditPolicy {
    /// Whether a run whose window ends at `end` audits the chunks it would
    /// carry, given the stored mark (None: no audit yet, or unreadable).
    /// Returns why (`every_run`, `every_runs`, `every_duration`, `first`).
    pub fn due(&self, mark: Option<&AuditMark>, end: Timestamp) -> Option<&'static str> {
        match (self, mark) {
            (AuditPolicy::Never, _) => None,
            (AuditPolicy::EveryRun, _) => Some("every_run"),
            (_, None) => Some("first"),
            (AuditPolicy::EveryRuns(n), Some(m)) => (m.runs_since.saturating_add(1) >= *n).then_some("every_runs"),
            (AuditPolicy::Every(d), Some(m)) => (end.0.saturating_sub(m.last_end) >= d.0).then_some("every_duration"),
        }
    }
}

/// The version of the record format and of the checksum over it.
pub const RECORD_VERSION: u32 = 1;

/// What a chunk's record is kept under: a record is only ever compared with
/// a chunk of exactly the same key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkKey {
    /// The target's scope (`<system>:<database>.<table>`), as leases use it.
    pub target_scope: String,
    pub window_column: String,
    /// Half-open bounds `[start, end)`, microseconds since the epoch (UTC).
    pub start: i64,
    pub end: i64,
    /// SHA-256 of the column names and canonical types, in order.
    pub columns: String,
    /// The authority and its algorithm version (`postgres.mvcc.v2`, ...).
    pub authority: String,
}

impl ChunkKey {
    pub fn new(target_scope: &str, window_column: &str, start: Timestamp, end: Timestamp, columns: &[Column], authority: &str) -> Self {
        ChunkKey {
            target_scope: target_scope.to_string(),
            window_column: window_column.to_string(),
            start: start.0,
            end: end.0,
            columns: columns_digest(columns),
            authority: authority.to_string(),
        }
    }

    /// The state store key of the record of this chunk: one record per
    /// target, window column and bounds (a record of other columns or of
    /// another authority under the same key is `NoRecord`).
    pub fn store_key(&self) -> String {
        format!("chunks/{}/{}/{}/{}", self.target_scope, self.window_column, self.start, self.end)
    }
}

/// SHA-256 of `name type` lines: a column added, removed, renamed, moved or
/// retyped gives another digest.
pub fn columns_digest(columns: &[Column]) -> String {
    let mut h = Sha256::new();
    for c in columns {
        h.update(c.name.as_bytes());
        h.update(b"\x00");
        h.update(c.ty.to_string().as_bytes());
        h.update(b"\n");
    }
    hex(&h.finalize())
}

/// A chunk's fingerprint as the source server computed it (count and an
/// order-independent digest, both opaque here).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fingerprint {
    pub rows: u64,
    pub digest: String,
    /// What decides the values a read of the chunk returns besides its
    /// rows, as the source names it (PostgreSQL: a digest of the columns'
    /// catalog entries, the relations and the cluster's identity;
    /// ClickHouse: the table's metadata, patch parts and pending
    /// mutations). Part of the equality: the same rows read through
    /// another catalog are another fingerprint (`changed`). None for
    /// records written before it existed, which then differ once.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub scope: Option<String>,
}

impl Fingerprint {
    /// A fingerprint of `rows` and `digest` without a scope.
    pub fn new(rows: u64, digest: impl Into<String>) -> Fingerprint {
        Fingerprint { rows, digest: digest.into(), scope: None }
    }
}

/// A source's fingerprints of adjacent chunks, by one authority.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkFingerprints {
    /// `postgres.mvcc.v2`, ...: part of every record's key.
    pub authority: &'static str,
    /// One per chunk, in the chunks' order.
    pub chunks: Vec<Fingerprint>,
    /// The pass that computed them, where the source can name it.
    pub pass: Option<SourcePass>,
    /// Proven equal to an [`Expected`] window by one ungrouped pass instead
    /// of computed per chunk.
    pub by_window: bool,
}

/// What one fingerprint pass of a source saw, kept with the records it
/// fingerprinted: a later pass may prove a whole window unchanged against
/// records that all come from one pass ([`expected_window`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourcePass {
    /// The pass's visibility (PostgreSQL: `pg_current_snapshot()`): two
    /// passes with the same one saw the same committed transactions.
    pub snapshot: String,
    /// The source's own count of writes to the table when the pass read
    /// (PostgreSQL: its statistics' inserted, updated and deleted rows). A
    /// hint only (not transactional, may lag or be reset): it chooses which
    /// proof the next pass tries first, never what a proof concludes.
    pub writes: Option<String>,
    /// The relations the pass read (PostgreSQL: the OIDs of the table and
    /// its partitions): a row is only ever in the relation it was
    /// inserted into, so a later pass over the same relations reads no
    /// row of an older transaction that this pass did not read.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub relations: Option<String>,
}

/// The fingerprints the records of every chunk of a window expect, all
/// written from one source pass: if the window's count and digest sum as
/// a whole equal their sums (and the source reads the relations that pass
/// read), no row version of the window was added or removed since, so
/// every chunk still has its recorded fingerprint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    pub pass: SourcePass,
    /// One per chunk, in the chunks' order.
    pub chunks: Vec<Fingerprint>,
}

/// The window's [`Expected`] fingerprints: only when every chunk of `keys`
/// has a valid record of its key and all the records name the same source
/// pass. Records of different passes could cancel out in a sum (a row
/// version counted in one chunk's older record and removed from another
/// chunk recorded later), so they are never proven as a whole.
pub fn expected_window(keys: &[ChunkKey], stored: impl Fn(&ChunkKey) -> Option<String>) -> Option<Expected> {
    let mut pass: Option<SourcePass> = None;
    let mut chunks = Vec::with_capacity(keys.len());
    for key in keys {
        let record = ChunkRecord::parse(&stored(key)?)?;
        if record.key != *key {
            return None;
        }
        let p = record.source_pass?;
        match &pass {
            Some(first) if *first != p => return None,
            Some(_) => {}
            None => pass = Some(p),
        }
        chunks.push(record.source);
    }
    Some(Expected { pass: pass?, chunks })
}

/// What the target holds of a chunk: the digest it is identified by (the
/// row hash of the run's digests, so that a record of another algorithm is
/// no record) and the chunk's identity (count, digest sum and NULL counts
/// of its rows, computed by the target over its stored rows).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetIdentity {
    pub incarnation: String,
    pub chunk: String,
    /// The same rows' identity from the target's metadata when it has one
    /// (`Target::range_part_identities`): equal parts mean the recorded
    /// rows without reading them; other parts are read and digested.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub parts: Option<String>,
}

impl TargetIdentity {
    /// The identity of rows with `contents`.
    pub fn of(contents: &crate::ports::Contents) -> TargetIdentity {
        let d = &contents.digest;
        TargetIdentity {
            incarnation: Self::incarnation_of(d.algorithm),
            chunk: format!("{}:{}:{:?}", contents.rows, d.sum_hex(), d.null_counts),
            parts: None,
        }
    }

    /// The rows of the chunk this identity names (`<rows>:<sum>:<nulls>`).
    pub fn rows(&self) -> Option<u64> {
        self.chunk.split(':').next()?.parse().ok()
    }

    /// The `incarnation` of identities digested with `algorithm`.
    pub fn incarnation_of(algorithm: crate::digest::DigestAlgorithm) -> String {
        format!("content.{}", algorithm.name())
    }
}

/// One chunk's decision, as journaled, reported and written to evidence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkDelivery {
    pub index: u32,
    pub start: Timestamp,
    pub end: Timestamp,
    pub decision: Decision,
    /// The source's fingerprint in the run's snapshot (None: the query failed).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub fingerprint: Option<Fingerprint>,
    /// An `unchanged` chunk's identity in the target when it was decided:
    /// the carried rows must still have it when they are published.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub carried: Option<TargetIdentity>,
    /// The same rows' identity from the target's metadata when it has one
    /// (`Target::range_part_identities`): a carried chunk whose identity
    /// is still this one needs no digest before the publication.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub carried_parts: Option<String>,
    /// A staged chunk's parts identity in the verified generation (what the
    /// target holds once it is published), for its record.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub published_parts: Option<String>,
}

/// The decisions of a `delivery: changed` run, journaled before any chunk
/// is staged; a resumed run keeps them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryDecisions {
    /// The authority of the fingerprints (`postgres.mvcc.v2`, ...).
    pub authority: String,
    pub chunks: Vec<ChunkDelivery>,
    /// The source pass of the fingerprints, kept with the records.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub source_pass: Option<SourcePass>,
    /// How the fingerprints were had: `chunks` (one grouped pass) or
    /// `window` (the whole window proven equal to records of one pass).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub fingerprints_by: Option<String>,
    /// The content audit of the chunks the authority would have carried
    /// (`window.audit`), when this run made one.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub audit: Option<AuditSummary>,
    /// After the publication: the staged and carried rows against the
    /// target's window, and the carried chunks read again.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub settled: Option<Settled>,
}

/// What the content audit of a `delivery: changed` run found
/// (`sink.strategy.window.audit`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditSummary {
    /// Why this run audited: `every_run`, `every_runs`, `every_duration`.
    pub reason: String,
    /// The chunks audited (those the authority would have carried).
    pub chunks: u32,
    /// Of them, the chunks whose source and target digests differed
    /// (decided `audit_mismatch`, transferred).
    pub mismatched: u32,
    /// The audit's wall time (both servers at once), in milliseconds.
    pub millis: u64,
}

/// The end of a run with carried chunks (docs/changed-delivery.md,
/// "Carried chunks add up"): the target's window rows, counted after the
/// publication, must be the rows staged plus the rows carried, and each
/// carried chunk must still have the identity the decision read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settled {
    pub staged_rows: u64,
    pub carried_rows: u64,
    pub target_window_rows: u64,
    /// Carried chunks whose identity was read again: by their parts (the
    /// target's metadata) or by digesting their rows.
    pub carried_by_parts: u32,
    pub carried_by_digest: u32,
    /// Carried chunks the publishing transaction itself compared with the
    /// decided identities under its lock, at its commit
    /// (`Target::checks_carried_in_publication`): not read again.
    #[serde(default)]
    pub carried_by_publication: u32,
    /// The carried chunks whose rows changed after the decision, by index.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub changed: Vec<u32>,
}

impl Settled {
    /// Whether the window adds up and no carried chunk changed.
    pub fn holds(&self) -> bool {
        self.changed.is_empty() && self.staged_rows.checked_add(self.carried_rows) == Some(self.target_window_rows)
    }
}

impl DeliveryDecisions {
    /// The `[start, end)` of the carried (`unchanged`) chunks, in order.
    pub fn carried_ranges(&self) -> Vec<(Timestamp, Timestamp)> {
        self.chunks.iter().filter(|c| c.decision == Decision::Unchanged).map(|c| (c.start, c.end)).collect()
    }

    pub fn is_carried(&self, index: u32) -> bool {
        self.chunks.iter().any(|c| c.index == index && c.decision == Decision::Unchanged)
    }

    /// How many chunks had each decision, e.g. `unchanged: 27, changed: 3`.
    pub fn summary(&self) -> String {
        let mut counts: Vec<(Decision, usize)> = Vec::new();
        for c in &self.chunks {
            match counts.iter_mut().find(|(d, _)| *d == c.decision) {
                Some((_, n)) => *n += 1,
                None => counts.push((c.decision, 1)),
            }
        }
        counts.iter().map(|(d, n)| format!("{}: {n}", d.as_str())).collect::<Vec<_>>().join(", ")
    }
}

/// The record of one chunk, written after its publication was judged
/// published.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkRecord {
    pub version: u32,
    pub key: ChunkKey,
    pub source: Fingerprint,
    pub target: TargetIdentity,
    pub run_id: String,
    /// The source pass that computed `source` (records of older versions
    /// have none).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub source_pass: Option<SourcePass>,
    /// SHA-256 over the fields above, so that a truncated or edited record
    /// is told from a valid one.
    pub checksum: String,
}

impl ChunkRecord {
    pub fn new(key: ChunkKey, source: Fingerprint, target: TargetIdentity, run_id: &str, source_pass: Option<SourcePass>) -> Self {
        let run_id = run_id.to_string();
        let mut r = ChunkRecord { version: RECORD_VERSION, key, source, target, run_id, source_pass, checksum: String::new() };
        r.checksum = r.computed_checksum();
        r
    }

    /// Over the fields in order; `source_pass` only when present, so that
    /// the records written before it existed keep their checksum.
    fn computed_checksum(&self) -> String {
        let body = match &self.source_pass {
            None => serde_json::json!([self.version, self.key, self.source, self.target, self.run_id]),
            Some(p) => serde_json::json!([self.version, self.key, self.source, self.target, self.run_id, p]),
        };
        hex(&Sha256::digest(body.to_string().as_bytes()))
    }

    /// The record as stored (JSON).
    pub fn body(&self) -> String {
        serde_json::to_string(self).expect("a record serializes")
    }

    /// A stored body, if it is a record of this version whose checksum holds.
    pub fn parse(body: &str) -> Option<ChunkRecord> {
        let r: ChunkRecord = serde_json::from_str(body).ok()?;
        (r.version == RECORD_VERSION && r.checksum == r.computed_checksum()).then_some(r)
    }
}

/// Whether a chunk moves, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// Carried from the target: nothing of it changed on either side.
    Unchanged,
    /// The source's fingerprint differs from the record's.
    Changed,
    /// No record of this key (or of this target incarnation).
    NoRecord,
    /// The target's rows of the chunk are not the ones published.
    TargetChanged,
    /// A stored copy does not parse, fails its checksum, or the two
    /// copies disagree.
    RecordInvalid,
    /// The source could not compute the fingerprint.
    FingerprintError,
    /// The source has no authority for this relation (a view, a foreign
    /// table, a ClickHouse table without parts): transferred, nothing of
    /// the snapshot touched.
    NoAuthority,
    /// A `delivery: all` run (or `--delivery all`): transferred; its
    /// fingerprint is kept so that the chunk's record is refreshed.
    Forced,
    /// The fingerprint and the target say unchanged, but carrying the
    /// chunk would copy its rows in the target (not aligned with the
    /// target's partitions) while other chunks are transferred: it is
    /// transferred, as `delivery: all` would, which costs less.
    CarryCostly,
    /// The content audit (`window.audit`) found the source's rows of a
    /// chunk the authority would carry different from the target's.
    AuditMismatch,
    /// The content audit was due but could not be read on one side (a
    /// server, or a type without a canonical form): the chunks it was to
    /// check are transferred, never judged equal or different.
    AuditError,
}

impl Decision {
    /// The chunk is staged and verified as by `delivery: all`.
    pub fn transfers(self) -> bool {
        self != Decision::Unchanged
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Unchanged => "unchanged",
            Decision::Changed => "changed",
            Decision::NoRecord => "no_record",
            Decision::TargetChanged => "target_changed",
            Decision::RecordInvalid => "record_invalid",
            Decision::FingerprintError => "fingerprint_error",
            Decision::NoAuthority => "no_authority",
            Decision::Forced => "forced",
            Decision::CarryCostly => "carry_costly",
            Decision::AuditMismatch => "audit_mismatch",
            Decision::AuditError => "audit_error",
        }
    }
}

/// What a run knows of one chunk when it decides.
#[derive(Debug, Clone, Copy)]
pub struct Evidence<'a> {
    pub key: &'a ChunkKey,
    /// The record's body in the state store, if any.
    pub stored: Option<&'a str>,
    /// The source's fingerprint in the run's snapshot (Err: the query failed).
    pub fingerprint: Result<&'a Fingerprint, ()>,
}

/// The first half of a decision, before the target is read: the record if
/// the chunk may be `unchanged` (a valid record of this key whose source
/// fingerprint equals the source's now), else the decision. The target's
/// identity is read only for the chunks this returns a record for.
pub fn candidate(e: Evidence<'_>) -> Result<ChunkRecord, Decision> {
    let Some(body) = e.stored else { return Err(Decision::NoRecord) };
    let Some(record) = ChunkRecord::parse(body) else { return Err(Decision::RecordInvalid) };
    if record.key != *e.key {
        return Err(Decision::NoRecord);
    }
    let Ok(fingerprint) = e.fingerprint else { return Err(Decision::FingerprintError) };
    if record.source != *fingerprint {
        return Err(Decision::Changed);
    }
    Ok(record)
}

/// The second half: a candidate is `unchanged` when the target's identity
/// of the chunk now is the record's.
pub fn confirm(record: &ChunkRecord, identity: &TargetIdentity) -> Decision {
    if record.target.incarnation != identity.incarnation {
        Decision::NoRecord
    } else if record.target.chunk != identity.chunk {
        Decision::TargetChanged
    } else {
        Decision::Unchanged
    }
}

/// The decision for one chunk (docs/changed-delivery.md, "The contract").
pub fn decide(e: Evidence<'_>, identity: &TargetIdentity) -> Decision {
    match candidate(e) {
        Ok(record) => confirm(&record, identity),
        Err(d) => d,
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests;

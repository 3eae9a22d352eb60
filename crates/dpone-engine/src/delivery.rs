//! `delivery: changed` (docs/changed-delivery.md): before any chunk is
//! staged, each chunk of the window is decided from the source's
//! fingerprint in the run's snapshot, the record of the target's last
//! verified publication and the target's rows of the chunk now; the
//! decisions are journaled (a resumed run keeps them) and the `unchanged`
//! chunks are carried from the target like the rows outside the window
//! (`Ctx::window_filter`). Before the publication, the generation's rows of
//! every carried chunk must still be the ones decided on; after it, a
//! record per published chunk is written to the state store.

use crate::context::Ctx;
use crate::journal::Journal;
use dpone_core::delivery::{
    AuditMark, ChunkDelivery, ChunkFingerprints, ChunkKey, ChunkRecord, Decision, Delivery, DeliveryDecisions, Evidence, Fingerprint,
    TargetIdentity, audit_key, candidate, confirm,
};
use dpone_core::digest::DigestAlgorithm;
use dpone_core::evidence::GenerationCheck;
use dpone_core::plan::WindowPlan;
use dpone_core::ports::{AdapterError, Contents, ErrorKind, PublicationOutcome, RowFilter, Source, TableRole, Target};
use dpone_core::state::{GenerationRecord, RunJournal, RunState, StateStore};
use dpone_core::types::Column;
use std::collections::BTreeMap;
use std::time::Instant;

/// Makes the journaled decisions the run's carried ranges (a resumed run),
/// with their decided identities where the target compares them in its
/// publishing transaction and every carried chunk has one.
pub(crate) fn restore<S: Source, T: Target>(ctx: &Ctx<S, T>, j: &RunJournal) {
    if let Some(d) = &j.delivery {
        let identities: Option<Vec<String>> = ctx
            .target
            .checks_carried_in_publication()
            .then(|| d.chunks.iter().filter(|c| c.decision == Decision::Unchanged).map(|c| c.carried_parts.clone()).collect())
            .flatten();
        *ctx.carried.lock().expect("carried lock") = (d.carried_ranges(), identities.unwrap_or_default());
    }
}

/// Decides every chunk once per run, before the first is staged. A run of
/// every chunk (`delivery: all`, or `--delivery all`) whose manifest asks
/// for `changed` or whose target has records keeps the source's
/// fingerprints too (every chunk `forced`), so that its publication
/// refreshes the records and the next `changed` run moves only what
/// changed after it.
pub(crate) async fn decide<S: Source, T: Target>(ctx: &Ctx<S, T>, journal: &Journal) -> Result<(), AdapterError> {
    let Some(w) = ctx.plan.window.as_ref().filter(|w| w.authority.is_some()) else { return Ok(()) };
    let j = journal.snapshot().await;
    if j.delivery.is_some() || !j.chunks.is_empty() {
        // Decided by an earlier invocation (kept), or staging began without
        // decisions: every chunk is transferred then.
        restore(ctx, &j);
        return Ok(());
    }
    let started = Instant::now();
    let records = journal.records_under(&records_prefix(&ctx.target.scope(), &w.column)).await?;
    let columns = &ctx.probe.target_columns;
    let decisions = if w.delivery == Delivery::Changed {
        let mut d = decisions(ctx.source.as_ref(), ctx.target.as_ref(), w, columns, ctx.plan.staging.digest, &records).await?;
        let mark = audit_mark(journal, &ctx.target.scope(), &w.column).await?;
        if let Some(reason) = w.audit.due(mark.as_ref(), w.end) {
            crate::audit_carried::audit_carried(ctx, w, &mut d, reason).await?;
        }
        d
    } else if w.keep_records || !records.is_empty() {
        forced(ctx.source.as_ref(), w).await?
    } else {
        return Ok(());
    };
    ctx.options.cancel.check()?;
    tracing::info!(authority = %decisions.authority, seconds = started.elapsed().as_secs_f64(), "changed-window delivery: {}", decisions.summary());
    ctx.add_phase(|p| p.fingerprint += started.elapsed().as_secs_f64());
    journal.update(|j| j.delivery = Some(decisions)).await?;
    restore(ctx, &journal.snapshot().await);
    ctx.failpoint("delivery.after_decide").await
}

/// A run of every chunk: the source's fingerprints for the records, every
/// chunk `forced`. A fingerprint that cannot be read only leaves the
/// chunks without records (the next `changed` run transfers them).
async fn forced<S: Source>(source: &S, w: &WindowPlan) -> Result<DeliveryDecisions, AdapterError> {
    let fingerprints = fingerprints(source, w, None).await?.ok();
    let authority = fingerprints.as_ref().map_or(w.authority.unwrap_or_default(), |f| f.authority).to_string();
    let chunks = w
        .chunks
        .iter()
        .enumerate()
        .map(|(i, c)| ChunkDelivery {
            index: c.index,
            start: c.start,
            end: c.end,
            decision: Decision::Forced,
            fingerprint: fingerprints.as_ref().map(|f| f.chunks[i].clone()),
            carried: None,
            carried_parts: None,
            published_parts: None,
        })
        .collect();
    let source_pass = fingerprints.as_ref().and_then(|f| f.pass.clone());
    let fingerprints_by = fingerprints.as_ref().map(|f| if f.by_window { "window" } else { "chunks" }.to_string());
    Ok(DeliveryDecisions { authority, chunks, source_pass, fingerprints_by, audit: None, settled: None })
}

/// The source's fingerprints of `w`'s chunks: `Ok(Err(decision))` when
/// they could not be had and every chunk is transferred with that decision
/// (`no_authority` for a relation the source cannot fingerprint,
/// `fingerprint_error` otherwise), with a warning that says why. Errors
/// that stop the run (an interruption, a lost lease) are returned.
async fn fingerprints<S: Source>(
    source: &S,
    w: &WindowPlan,
    expected: Option<&dpone_core::delivery::Expected>,
) -> Result<Result<ChunkFingerprints, Decision>, AdapterError> {
    match source.chunk_fingerprints(&w.column, &w.chunks, expected).await {
        Ok(Some(f)) if f.chunks.len() == w.chunks.len() => Ok(Ok(f)),
        Ok(Some(f)) => Err(AdapterError::internal(format!("{} fingerprints of {} chunks", f.chunks.len(), w.chunks.len()))),
        // The plan refused a source whose descriptor names no authority.
        Ok(None) => Err(AdapterError::internal("a source with a delivery authority computed no fingerprints")),
        Err(e) if e.keeps_run() || e.kind == ErrorKind::Interrupted => Err(e),
        // The relation has no authority (a view, a table without parts).
        Err(e) if e.kind == ErrorKind::Unsupported => {
            tracing::warn!("{}", e.message);
            Ok(Err(Decision::NoAuthority))
        }
        Err(e) => {
            tracing::warn!("the chunks' fingerprints could not be read ({}): every chunk is transferred", e.message);
            Ok(Err(Decision::FingerprintError))
        }
    }
}

/// The target's last content audit of `column` ([`AuditMark`]); None when
/// there was none or its record does not parse (an audit is then due).
async fn audit_mark(journal: &Journal, scope: &str, column: &str) -> Result<Option<AuditMark>, AdapterError> {
    let key = audit_key(scope, column);
    let found = journal.records_under(&key).await?;
    Ok(found.get(&key).and_then(|body| serde_json::from_str(body).ok()))
}

/// The state store prefix of a target's chunk records of `column` (the
/// keys `ChunkKey::store_key` makes).
pub fn records_prefix(target_scope: &str, column: &str) -> String {
    format!("chunks/{target_scope}/{column}/")
}

/// The records under `prefix`, by key (read-only).
pub fn read_records(store: &dyn StateStore, prefix: &str) -> Result<BTreeMap<String, String>, AdapterError> {
    let mut out = BTreeMap::new();
    for key in store.keys(prefix).map_err(crate::journal::store_error)? {
        if let Some(v) = store.get(&key).map_err(crate::journal::store_error)? {
            out.insert(key, v.body);
        }
    }
    Ok(out)
}

/// The decision of every chunk of `w` (read-only; the source's snapshot
/// must be open): the source's fingerprints, the `records`
/// ([`read_records`]) and, for the chunks that may be unchanged, the
/// target's rows of the chunk. `dpone plan` shows it; a run journals it.
pub async fn decisions<S: Source, T: Target>(
    source: &S,
    target: &T,
    w: &WindowPlan,
    columns: &[Column],
    digest: DigestAlgorithm,
    records: &BTreeMap<String, String>,
) -> Result<DeliveryDecisions, AdapterError> {
    let incarnation = TargetIdentity::incarnation_of(digest);
    let scope = target.scope();
    // The records' fingerprints, when all come from one source pass: the
    // source may prove them for the whole window at once.
    let expected = w.authority.and_then(|authority| {
        let keys: Vec<ChunkKey> = w.chunks.iter().map(|c| ChunkKey::new(&scope, &w.column, c.start, c.end, columns, authority)).collect();
        dpone_core::delivery::expected_window(&keys, |k| records.get(&k.store_key()).cloned())
    });
    let fingerprints = fingerprints(source, w, expected.as_ref()).await?;
    let authority = fingerprints.as_ref().map(|f| f.authority).unwrap_or("");
    let source_pass = fingerprints.as_ref().ok().and_then(|f| f.pass.clone());
    let fingerprints_by = fingerprints.as_ref().ok().map(|f| if f.by_window { "window" } else { "chunks" }.to_string());
    let mut chunks = Vec::with_capacity(w.chunks.len());
    // Chunks whose record and fingerprint say unchanged, with their record.
    let mut candidates = Vec::new();
    for (i, c) in w.chunks.iter().enumerate() {
        let key = ChunkKey::new(&scope, &w.column, c.start, c.end, columns, authority);
        let stored = records.get(&key.store_key()).map(String::as_str);
        let fingerprint: Option<&Fingerprint> = fingerprints.as_ref().ok().map(|f| &f.chunks[i]);
        let decision = match (&fingerprints, candidate(Evidence { key: &key, stored, fingerprint: fingerprint.ok_or(()) })) {
            (Err(no_fingerprints), _) => *no_fingerprints,
            (Ok(_), Err(d)) => d,
            (Ok(_), Ok(record)) => {
                candidates.push((i, record));
                Decision::NoRecord
            }
        };
        let fingerprint = fingerprint.cloned();
        let (carried, carried_parts, published_parts) = (None, None, None);
        chunks.push(ChunkDelivery {
            index: c.index,
            start: c.start,
            end: c.end,
            decision,
            fingerprint,
            carried,
            carried_parts,
            published_parts,
        });
    }
    // The target's rows of each candidate: by metadata when its parts are
    // the recorded ones (same parts, same rows), else counted and digested.
    // A target that would copy a candidate's rows to carry it (no parts:
    // not aligned with its partitions) carries it only when no chunk is
    // transferred; otherwise transferring it costs less (`carry_costly`).
    let ranges: Vec<_> = candidates.iter().map(|(i, _)| (w.chunks[*i].start, w.chunks[*i].end)).collect();
    let parts = target.range_part_identities(TableRole::Target, &w.column, &ranges).await?;
    let copies = |parts: &Option<String>| parts.is_none() && !target.keeps_rows_in_place();
    let is_candidate: std::collections::BTreeSet<usize> = candidates.iter().map(|(i, _)| *i).collect();
    let mut transferring = chunks.iter().enumerate().any(|(k, c)| !is_candidate.contains(&k) && c.decision.transfers());
    // The candidates to read: not carried by their recorded parts, and not
    // costlier to carry than to transfer. Their rows are read in one call.
    let mut read = Vec::new();
    let mut confirmed: Vec<(usize, ChunkRecord, Option<String>, Option<TargetIdentity>)> = Vec::new();
    for ((i, record), now_parts) in candidates.into_iter().zip(parts) {
        if copies(&now_parts) && transferring {
            chunks[i].decision = Decision::CarryCostly;
            continue;
        }
        let same_parts = now_parts.is_some() && record.target.parts == now_parts && record.target.incarnation == incarnation;
        if !same_parts {
            read.push((w.chunks[i].start, w.chunks[i].end));
        }
        let known = same_parts.then(|| record.target.clone());
        confirmed.push((i, record, now_parts, known));
    }
    let mut contents = target.inspect_ranges(TableRole::Target, &w.column, &read).await?.into_iter();
    for (i, record, now_parts, known) in confirmed {
        let now = match known {
            Some(identity) => identity,
            None => {
                let c = contents.next().ok_or_else(|| AdapterError::internal("a range the target did not inspect"))?;
                TargetIdentity { parts: now_parts.clone(), ..TargetIdentity::of(&c) }
            }
        };
        let d = confirm(&record, &now);
        transferring |= d.transfers();
        let chunk = &mut chunks[i];
        chunk.decision = d;
        if d == Decision::Unchanged {
            (chunk.carried, chunk.carried_parts) = (Some(now), now_parts);
        }
    }
    // A candidate confirmed before a later one turned out changed.
    if transferring {
        for c in chunks.iter_mut().filter(|c| c.decision == Decision::Unchanged && copies(&c.carried_parts)) {
            (c.decision, c.carried) = (Decision::CarryCostly, None);
        }
    }
    Ok(DeliveryDecisions { authority: authority.to_string(), chunks, source_pass, fingerprints_by, audit: None, settled: None })
}

/// Whether this run decided every chunk of the window `unchanged` and so
/// staged none: the target already holds the window the source holds in
/// the run's snapshot (each chunk's record says the source did not change
/// since its verified publication, and the target's rows of it, read at
/// the decision, are still the ones published), so there is nothing to
/// publish ([`publish_nothing`]).
pub(crate) fn nothing_to_publish<S: Source, T: Target>(ctx: &Ctx<S, T>, j: &RunJournal) -> bool {
    let all_carried =
        j.delivery.as_ref().is_some_and(|d| !d.chunks.is_empty() && d.chunks.iter().all(|c| c.decision == Decision::Unchanged));
    all_carried && j.chunks.is_empty() && !ctx.publication.moves_mark()
}

/// Every chunk carried: no generation is built and nothing is published or
/// written to the target (no exchange, no publishing transaction, no
/// receipt), so no other writer's work can be disturbed. The journal
/// records an empty generation verified as
/// [`GenerationCheck::NothingToPublish`] and goes to `published` without
/// an intent; the records and the evidence follow as after a publication.
pub(crate) async fn publish_nothing<S: Source, T: Target>(ctx: &Ctx<S, T>, journal: &Journal) -> crate::failure::Step {
    let ncols = ctx.probe.target_columns.len();
    let empty = dpone_core::digest::RowDigest::with(ctx.plan.staging.digest, ncols);
    let record = GenerationRecord {
        table: String::new(),
        rows: 0,
        in_place: true,
        digest_sum: empty.sum_hex(),
        null_counts: vec![0; ncols],
        kept_rows: 0,
        kept_digest_sum: empty.sum_hex(),
        kept_null_counts: vec![0; ncols],
        replaced_rows: 0,
        unchanged: true,
        check: GenerationCheck::NothingToPublish,
        link: None,
        build_seconds: 0.0,
        merged_rows: None,
        target_stats: None,
    };
    tracing::info!("changed-window delivery: every chunk is unchanged; nothing to publish");
    journal
        .update(|j| {
            j.generation = Some(record);
            j.state = RunState::Published;
            j.publication = Some(PublicationOutcome::Published);
        })
        .await?;
    Ok(())
}

/// Right after the generation is built (and before a resumed run
/// publishes it): the rows of every carried chunk are exactly those decided
/// on, so a writer that changed the target's chunk between the decision and
/// the build is refused rather than published as if the source had it. A
/// generation that copied or linked them holds them; a target that keeps
/// rows in place still holds them itself, and its publishing transaction
/// re-checks them with the other kept rows (`Target::compare_kept`). A
/// target that compares the carried ranges' identities in its publishing
/// transaction (`Target::checks_carried_in_publication`) is not read here:
/// that comparison, under its lock, is later than this one could be.
pub(crate) async fn check_carried<S: Source, T: Target>(ctx: &Ctx<S, T>, j: &RunJournal, generation: &str) -> Result<(), AdapterError> {
    // The journaled decisions, whatever this invocation's `--delivery`.
    let (Some(w), Some(d)) = (ctx.plan.window.as_ref(), &j.delivery) else { return Ok(()) };
    // Compared by the publishing transaction itself, under its lock.
    if ctx.window_filter(false).is_some_and(|k| k.carried_by_identity()) {
        return Ok(());
    }
    let table = if ctx.target.keeps_rows_in_place() { TableRole::Target } else { TableRole::Owned(generation) };
    // The target's metadata identity unchanged since the decision: the
    // target was not written there, and the generation's build verified
    // that it holds the target's rows outside the replaced chunks.
    let parts = ctx.target.range_part_identities(TableRole::Target, &w.column, &d.carried_ranges()).await?;
    let carried = d.chunks.iter().filter(|c| c.decision == Decision::Unchanged);
    // The others are read in one call and compared by their rows (a merge
    // since the decision gives other parts of the same rows).
    let read: Vec<&ChunkDelivery> =
        carried.zip(parts).filter(|(c, now)| now.is_none() || *now != c.carried_parts).map(|(c, _)| c).collect();
    let ranges: Vec<_> = read.iter().map(|c| (c.start, c.end)).collect();
    let contents = ctx.target.inspect_ranges(table, &w.column, &ranges).await?;
    for (c, contents) in read.into_iter().zip(contents) {
        let now = TargetIdentity::of(&contents);
        if c.carried.as_ref().map(|i| (&i.incarnation, &i.chunk)) != Some((&now.incarnation, &now.chunk)) {
            return Err(AdapterError::verification(
                "target_changed_since_decision",
                format!(
                    "the target's rows of chunk {} [{}, {}) changed after the run decided to carry them (now {}, decided {})",
                    c.index,
                    c.start,
                    c.end,
                    now.chunk,
                    c.carried.as_ref().map(|i| i.chunk.as_str()).unwrap_or("none")
                ),
            )
            .hint("another writer changed the target's window during the run; nothing was published: run again (the chunk is then transferred)"));
        }
    }
    Ok(())
}

/// After the generation is verified: the parts identity of every staged
/// chunk in it, which the target holds once it is published (the exchange
/// renames no part), for the chunk's record. A merge before the exchange
/// only makes the record's parts differ: the next run digests the chunk.
pub(crate) async fn note_published_parts<S: Source, T: Target>(
    ctx: &Ctx<S, T>,
    journal: &Journal,
    generation: &str,
) -> Result<(), AdapterError> {
    let j = journal.snapshot().await;
    let (Some(w), Some(d)) = (ctx.plan.window.as_ref(), &j.delivery) else { return Ok(()) };
    if ctx.target.keeps_rows_in_place() {
        return Ok(());
    }
    let staged: Vec<&ChunkDelivery> = d.chunks.iter().filter(|c| c.decision != Decision::Unchanged).collect();
    let ranges: Vec<_> = staged.iter().map(|c| (c.start, c.end)).collect();
    let parts = ctx.target.range_part_identities(TableRole::Owned(generation), &w.column, &ranges).await?;
    let noted: BTreeMap<u32, Option<String>> = staged.iter().map(|c| c.index).zip(parts).collect();
    journal
        .update(|j| {
            for c in j.delivery.iter_mut().flat_map(|d| d.chunks.iter_mut()) {
                if let Some(p) = noted.get(&c.index) {
                    c.published_parts = p.clone();
                }
            }
        })
        .await
}

/// Whether each chunk a `delivery: changed` run staged is, in the target,
/// as many rows as were staged for it. One that is not shows that the
/// rows the publication replaces differ from the new ones without reading
/// them (`target_unchanged: false`; the window's total count can be equal,
/// e.g. a row deleted in one day and a late one in another). Asked only
/// when more than one chunk was staged: with one, the total says the same.
pub(crate) async fn staged_counts_match<S: Source, T: Target>(ctx: &Ctx<S, T>, j: &RunJournal) -> Result<bool, AdapterError> {
    let (Some(w), Some(d)) = (ctx.plan.window.as_ref(), &j.delivery) else { return Ok(true) };
    let staged: Vec<(&ChunkDelivery, u64)> =
        d.chunks.iter().filter(|c| c.decision != Decision::Unchanged).filter_map(|c| j.chunks.get(&c.index).map(|s| (c, s.rows))).collect();
    if staged.len() < 2 {
        return Ok(true);
    }
    for (c, rows) in staged {
        let range = RowFilter::new(&w.column, c.start, c.end, true);
        if ctx.target.count(TableRole::Target, Some(&range)).await? != rows {
            return Ok(false);
        }
    }
    Ok(true)
}

/// A target that keeps rows in place: the identity of each staged chunk's
/// rows as the publication left them, by chunk index, where the target
/// proves that it still holds exactly the rows the publication inserted
/// (`Target::published_range_identities`); a chunk someone wrote since has
/// none, and its next run reads and digests it.
async fn published_in_place<S: Source, T: Target>(
    ctx: &Ctx<S, T>,
    j: &RunJournal,
    d: &DeliveryDecisions,
) -> Result<BTreeMap<u32, Option<String>>, AdapterError> {
    let (Some(w), Some(intent)) = (ctx.plan.window.as_ref(), j.intent.as_ref()) else { return Ok(BTreeMap::new()) };
    if !ctx.target.keeps_rows_in_place() {
        return Ok(BTreeMap::new());
    }
    let staged: Vec<(u32, (dpone_core::time::Timestamp, dpone_core::time::Timestamp, u64))> = d
        .chunks
        .iter()
        .filter(|c| c.decision != Decision::Unchanged && c.fingerprint.is_some())
        .filter_map(|c| j.chunks.get(&c.index).map(|s| (c.index, (c.start, c.end, s.rows))))
        .collect();
    if staged.is_empty() {
        return Ok(BTreeMap::new());
    }
    let ranges: Vec<_> = staged.iter().map(|(_, r)| *r).collect();
    let found = ctx.target.published_range_identities(&intent.generation_table, &w.column, &ranges).await?;
    Ok(staged.iter().map(|(i, _)| *i).zip(found).collect())
}

/// After the publication was judged published: the record of every chunk
/// of the window, so that the next run can tell which changed. A staged
/// chunk's target identity is its verified staging digest (the rows the
/// publication made visible), a carried one's the identity it was decided
/// on. A chunk whose fingerprint failed gets no record (an older one stays
/// and can only match rows that still equal it).
pub(crate) async fn write_records<S: Source, T: Target>(ctx: &Ctx<S, T>, journal: &Journal, j: &RunJournal) -> Result<(), AdapterError> {
    // The journaled decisions, whatever this invocation's `--delivery`.
    let (Some(w), Some(d)) = (ctx.plan.window.as_ref(), &j.delivery) else { return Ok(()) };
    let scope = ctx.target.scope();
    let published = published_in_place(ctx, j, d).await?;
    for c in &d.chunks {
        let Some(fingerprint) = &c.fingerprint else { continue };
        let identity = match (&c.carried, j.chunks.get(&c.index)) {
            (Some(carried), _) if c.decision == Decision::Unchanged => TargetIdentity { parts: c.carried_parts.clone(), ..carried.clone() },
            (_, Some(staged)) => {
                let digest = staged.digest().ok_or_else(|| AdapterError::internal("unreadable chunk digest in the journal"))?;
                let parts = c.published_parts.clone().or_else(|| published.get(&c.index).cloned().flatten());
                TargetIdentity { parts, ..TargetIdentity::of(&Contents { rows: staged.rows, digest }) }
            }
            (_, None) => return Err(AdapterError::internal(format!("chunk {} was neither carried nor staged", c.index))),
        };
        let key = ChunkKey::new(&scope, &w.column, c.start, c.end, &ctx.probe.target_columns, &d.authority);
        let record = ChunkRecord::new(key, fingerprint.clone(), identity, &j.run_id, d.source_pass.clone());
        journal.put_record(&record.key.store_key(), record.body()).await?;
    }
    // The audit mark: this run audited what it carried, or carried nothing
    // (every chunk verified by staging); else one more run since.
    let carried = d.chunks.iter().any(|c| c.decision == Decision::Unchanged);
    let key = audit_key(&scope, &w.column);
    let mark = if d.audit.is_some() || !carried {
        AuditMark { last_end: w.end.0, runs_since: 0 }
    } else {
        let before = audit_mark(journal, &scope, &w.column).await?;
        AuditMark { last_end: before.as_ref().map_or(i64::MIN, |m| m.last_end), runs_since: before.map_or(1, |m| m.runs_since + 1) }
    };
    let body = serde_json::to_string(&mark).map_err(|e| AdapterError::internal(e.to_string()))?;
    journal.put_record(&key, body).await?;
    ctx.failpoint("delivery.after_records").await?;
    Ok(())
}

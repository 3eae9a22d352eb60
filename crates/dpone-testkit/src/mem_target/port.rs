//! `impl Target for MemTarget`: each method follows the real sink of the
//! chosen [`Publication`] model step by step (`dpone-clickhouse/src/sink.rs`
//! for Exchange, `dpone-postgres/src/sink.rs` for InPlaceReceipt,
//! `dpone-sqlite/src/sink.rs` for InPlaceDigest). Where the adapters differ
//! in what the engine can observe, the code branches on the model and says
//! which statement it stands for.

use super::store::{Body, Db, Receipt, TargetCall, contents, multiplicity_difference, select, table_exists, unknown_table, window_stats};
use super::{MemTarget, Publication, RECEIPTS_TABLE};
use crate::faulty::TargetOp;
use dpone_core::Diagnostic;
use dpone_core::audit::{AuditRow, AuditSpec, SegmentDigest};
use dpone_core::evidence::PublicationCheck;
use dpone_core::identity::OWNED_PREFIX;
use dpone_core::incremental::StoredMark;
use dpone_core::ports::{
    AdapterError, ClaimAttempt, ClaimRecord, ClaimRequest, Contents, DirectFeed, EligibilityRequest, FrameRx, GenerationBuild,
    MarkedPublication, MergeCounts, MergeKey, PublicationOutcome, Result, RowFilter, TableRole, Target, TargetClaim, WindowStats,
    check_publication_unmoved, check_reset_unmoved,
};
use dpone_core::time::Timestamp;
use dpone_core::types::Column;

/// Beyond this many chunks PostgreSQL copies into a table instead of a view.
const MAX_VIEW_ARMS: usize = 1000;

impl MemTarget {
    pub(super) fn log(&self, op: TargetOp, tables: Vec<String>) {
        self.lock().calls.push(TargetCall { op, tables });
    }

    fn name_of(&self, role: TableRole<'_>) -> String {
        match role {
            TableRole::Target => self.table.clone(),
            TableRole::Owned(n) => n.to_string(),
        }
    }

    /// Columns as of `describe`: every real adapter needs them first.
    pub(super) fn columns(&self) -> Result<Vec<Column>> {
        self.described.get().cloned().ok_or_else(|| AdapterError::permanent("internal_error", "target used before describe"))
    }

    /// The columns and decoded rows of `table` (audit reads; not logged).
    fn decoded(&self, table: TableRole<'_>) -> Result<(Vec<Column>, Vec<crate::rows::Row>)> {
        let db = self.lock();
        let (columns, rows) = db.read(&self.name_of(table))?;
        let rows = rows.iter().map(|r| super::store::decode_stored(&columns, r)).collect::<Result<Vec<_>>>()?;
        Ok((columns, rows))
    }

    /// The target's rows selected by `filter`, read under the lock.
    fn target_selected(&self, db: &Db, filter: &RowFilter) -> Result<Vec<Vec<u8>>> {
        let (columns, rows) = db.read(&self.table)?;
        select(&columns, rows, Some(filter))
    }

    fn kept_difference(&self, db: &Db, generation: &str, keep: &RowFilter) -> Result<u64> {
        let target = self.target_selected(db, keep)?;
        let kept = match self.model {
            // The generation holds the window only: compare with the kept
            // rows as they were when it was built.
            Publication::InPlaceReceipt => db.get(generation)?.kept_at_build.clone().unwrap_or_default(),
            Publication::Exchange | Publication::InPlaceDigest => {
                let (gc, gr) = db.read(generation)?;
                select(&gc, gr, Some(keep))?
            }
        };
        Ok(multiplicity_difference(&target, &kept))
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// Decodes `frame`'s rows one by one, as the server would parse them.
pub(super) fn split_frame(columns: &[Column], frame: &[u8], rows: u64) -> Result<Vec<Vec<u8>>> {
    let types = crate::rows::types_of(columns);
    let mut input = frame;
    let mut out = Vec::with_capacity(rows as usize);
    for _ in 0..rows {
        let before = input;
        dpone_core::rowbinary::decode_row(&mut input, &types).map_err(|e| AdapterError::permanent("invalid_frame", e.to_string()))?;
        out.push(before[..before.len() - input.len()].to_vec());
    }
    if !input.is_empty() {
        return Err(AdapterError::permanent("invalid_frame", "a frame holds bytes past its last row"));
    }
    Ok(out)
}

impl Target for MemTarget {
    async fn describe(&self) -> Result<Option<Vec<Column>>> {
        self.log(TargetOp::Describe, vec![self.table.clone()]);
        let cols = self.lock().tables.get(&self.table).map(|t| t.columns.clone());
        if let Some(c) = &cols {
            let _ = self.described.set(c.clone());
        }
        Ok(cols)
    }

    async fn eligibility(&self, _request: &EligibilityRequest) -> Result<Vec<Diagnostic>> {
        self.log(TargetOp::Eligibility, vec![self.table.clone()]);
        let db = self.lock();
        if !db.tables.contains_key(&self.table) {
            return Ok(vec![
                Diagnostic::new("target_missing", "sink.table", format!("target table {} does not exist", self.table))
                    .hint("create the target table first; dpone replaces data, it does not invent schemas"),
            ]);
        }
        Ok(db.refusals.clone())
    }

    async fn datetime64_range(&self) -> Result<Option<dpone_core::rowbinary::DateTime64Range>> {
        Ok(self.lock().datetime64_range)
    }

    async fn create_staging(&self, name: &str) -> Result<()> {
        self.log(TargetOp::CreateStaging, vec![name.to_string()]);
        let columns = match self.model {
            // SQLite declares the staging from the described columns.
            Publication::InPlaceDigest => self.columns()?,
            // `CREATE TABLE stg AS target` / `(LIKE target)`: the target's shape now.
            Publication::Exchange | Publication::InPlaceReceipt => self.lock().get(&self.table)?.columns.clone(),
        };
        self.lock().create(name, columns, Body::Rows(Vec::new()))
    }

    async fn load(&self, table: &str, mut frames: FrameRx) -> Result<u64> {
        self.log(TargetOp::Load, vec![table.to_string()]);
        if self.model != Publication::Exchange {
            self.columns()?;
        }
        let mut written = 0u64;
        if self.model == Publication::InPlaceDigest {
            // One transaction: the rows land together or not at all (the
            // INSERT is prepared first, so a missing table fails up front).
            let columns = self.lock().get(table)?.columns.clone();
            let mut all = Vec::new();
            while let Some(frame) = frames.recv().await {
                all.extend(split_frame(&columns, &frame.bytes, frame.rows)?);
                written += frame.rows;
            }
            self.lock().rows_mut(table)?.extend(all);
            return Ok(written);
        }
        // PostgreSQL COPYs one frame at a time and ClickHouse INSERTs
        // requests of up to max_request_bytes: a failure leaves what was
        // committed before it. The fake commits frame by frame (a finer
        // grain than ClickHouse; the engine never reuses a failed staging).
        while let Some(frame) = frames.recv().await {
            let mut db = self.lock();
            let columns = db.get(table)?.columns.clone();
            let rows = split_frame(&columns, &frame.bytes, frame.rows)?;
            db.rows_mut(table)?.extend(rows);
            written += frame.rows;
        }
        Ok(written)
    }

    async fn inspect(&self, table: TableRole<'_>, filter: Option<&RowFilter>) -> Result<Contents> {
        let name = self.name_of(table);
        self.log(TargetOp::Inspect, vec![name.clone()]);
        let ncols = self.columns()?.len();
        let mut db = self.lock();
        let (columns, rows) = db.read(&name)?;
        let selected = select(&columns, rows, filter)?;
        let c = contents(&columns, ncols, &selected)?;
        // PostgreSQL records the fingerprint of a staging table it verified.
        if self.model == Publication::InPlaceReceipt && filter.is_none() && name.starts_with(&format!("{OWNED_PREFIX}stg_")) {
            db.tables.get_mut(&name).expect("just read").verified_rows = Some(selected);
        }
        Ok(c)
    }

    async fn content_digests(&self, table: TableRole<'_>, spec: &AuditSpec, bounds: &[Timestamp]) -> Result<Option<Vec<SegmentDigest>>> {
        let (columns, rows) = self.decoded(table)?;
        crate::audit::digests(&columns, &rows, spec, bounds).map(Some)
    }

    async fn content_rows(
        &self,
        table: TableRole<'_>,
        spec: &AuditSpec,
        start: Timestamp,
        end: Timestamp,
        limit: u64,
    ) -> Result<Option<Vec<AuditRow>>> {
        let (columns, rows) = self.decoded(table)?;
        crate::audit::audit_rows(&columns, &rows, spec, start, end, limit).map(Some)
    }

    async fn count(&self, table: TableRole<'_>, filter: Option<&RowFilter>) -> Result<u64> {
        let name = self.name_of(table);
        self.log(TargetOp::Count, vec![name.clone()]);
        let db = self.lock();
        let (columns, rows) = db.read(&name)?;
        Ok(select(&columns, rows, filter)?.len() as u64)
    }

    fn keeps_rows_in_place(&self) -> bool {
        self.model == Publication::InPlaceReceipt
    }

    fn carries_unchanged_chunks(&self) -> bool {
        !self.publishes_direct()
    }

    fn publication_check(&self) -> PublicationCheck {
        match self.model {
            Publication::Exchange => PublicationCheck::TableIdentity,
            Publication::InPlaceReceipt => PublicationCheck::Receipt,
            Publication::InPlaceDigest => PublicationCheck::Digest,
        }
    }

    async fn build_generation(&self, generation: &str, keep: Option<&RowFilter>, stagings: &[String]) -> Result<GenerationBuild> {
        let mut logged = vec![generation.to_string()];
        logged.extend(stagings.iter().cloned());
        self.log(TargetOp::BuildGeneration, logged);
        let described = self.columns()?;
        let mut db = self.lock();
        match self.model {
            Publication::Exchange => {
                // DROP IF EXISTS; CREATE gen AS target; INSERT kept rows;
                // ATTACH PARTITION FROM each staging. Each is its own
                // statement: a failure leaves the steps before it done.
                db.tables.remove(generation);
                let columns = db.get(&self.table)?.columns.clone();
                db.create(generation, columns, Body::Rows(Vec::new()))?;
                if let Some(k) = keep {
                    let kept = self.target_selected(&db, k)?;
                    db.rows_mut(generation)?.extend(kept);
                }
                for s in stagings {
                    // A missing staging has no parts in system.parts: nothing
                    // is attached and no error is raised.
                    if let Some(Body::Rows(r)) = db.tables.get(s).map(|t| t.body.clone()) {
                        db.rows_mut(generation)?.extend(r);
                    }
                }
                Ok(GenerationBuild::Linked)
            }
            Publication::InPlaceReceipt => {
                // One transaction: drop the previous generation, then a
                // `UNION ALL` view over the stagings (a table beyond 1000
                // chunks). A missing staging fails it before any change.
                for s in stagings {
                    if !matches!(db.tables.get(s).map(|t| &t.body), Some(Body::Rows(_))) {
                        return Err(unknown_table(s));
                    }
                }
                let columns = db.get(&self.table)?.columns.clone();
                let kept = keep.map(|k| self.target_selected(&db, k)).transpose()?;
                // The sum of the stagings' verified fingerprints.
                let mut verified = Vec::new();
                for s in stagings {
                    let rows = db.get(s)?.verified_rows.clone().ok_or_else(|| {
                        AdapterError::verification("generation_verification_failed", format!("staging table {s} was never verified"))
                    })?;
                    verified.extend(rows);
                }
                db.tables.remove(generation);
                let build = if stagings.len() <= MAX_VIEW_ARMS {
                    db.create(generation, columns, Body::View(stagings.to_vec()))?;
                    GenerationBuild::WindowOnlyView
                } else {
                    let mut rows = Vec::new();
                    for s in stagings {
                        rows.extend(db.read(s)?.1);
                    }
                    db.create(generation, columns, Body::Rows(rows))?;
                    GenerationBuild::WindowOnly
                };
                let g = db.tables.get_mut(generation).expect("just created");
                g.kept_at_build = kept;
                g.verified_rows = Some(verified);
                Ok(build)
            }
            Publication::InPlaceDigest => {
                // One transaction: all of it or nothing.
                let mut rows = Vec::new();
                if let Some(k) = keep {
                    rows.extend(self.target_selected(&db, k)?);
                }
                for s in stagings {
                    let (_, r) = db.read(s)?;
                    rows.extend(r);
                }
                db.tables.remove(generation);
                db.create(generation, described, Body::Rows(rows))?;
                Ok(GenerationBuild::Copied)
            }
        }
    }

    async fn compare_kept(&self, generation: &str, keep: &RowFilter) -> Result<u64> {
        self.log(TargetOp::CompareKept, vec![generation.to_string()]);
        self.columns()?;
        let db = self.lock();
        if db.compare_kept_gap {
            return Ok(0);
        }
        self.kept_difference(&db, generation, keep)
    }

    async fn publish(&self, generation: &str, keep: Option<&RowFilter>, backup: &str) -> Result<PublicationOutcome> {
        self.log(TargetOp::Publish, vec![generation.to_string(), backup.to_string()]);
        self.columns()?;
        let mut db = self.lock();
        match self.model {
            Publication::Exchange => {
                // EXCHANGE TABLES target AND gen; `keep` is not re-checked.
                if !db.tables.contains_key(&self.table) || !db.tables.contains_key(generation) {
                    return Err(AdapterError::permanent(
                        "publication_failed",
                        "the target or the generation disappeared before publication",
                    ));
                }
                let (t, g) = (db.tables.remove(&self.table).expect("checked"), db.tables.remove(generation).expect("checked"));
                db.tables.insert(self.table.clone(), g);
                db.tables.insert(generation.to_string(), t);
            }
            Publication::InPlaceReceipt => {
                // CREATE TABLE IF NOT EXISTS receipts (its own statement), then
                // one transaction: DELETE the window (TRUNCATE without keep),
                // INSERT from the generation, INSERT the receipt.
                if !db.tables.contains_key(RECEIPTS_TABLE) {
                    db.create(RECEIPTS_TABLE, Vec::new(), Body::Receipts(Vec::new()))?;
                }
                // LOCK the target; the kept rows' fingerprint must be the
                // one recorded at the build, and the rows inserted the ones
                // the stagings held when they were verified.
                if let Some(k) = keep
                    && !db.compare_kept_gap
                {
                    let diff = self.kept_difference(&db, generation, k)?;
                    if diff > 0 {
                        return Err(AdapterError::verification(
                            "kept_rows_changed",
                            format!("the target's rows outside the window changed since the generation was built ({diff} groups)"),
                        ));
                    }
                }
                let (_, new_rows) = db.read(generation)?;
                let verified = db.get(generation)?.verified_rows.clone().unwrap_or_default();
                if multiplicity_difference(&new_rows, &verified) != 0 {
                    return Err(AdapterError::verification(
                        "generation_verification_failed",
                        format!("the generation {generation} no longer holds the rows its stagings held when verified"),
                    ));
                }
                let (tc, old) = db.read(&self.table)?;
                let kept = match keep {
                    Some(k) => select(&tc, old, Some(&RowFilter { inside: false, ..k.clone() }))?,
                    None => Vec::new(),
                };
                let rows = new_rows.len() as u64;
                *db.rows_mut(&self.table)? = kept.into_iter().chain(new_rows).collect();
                if let Some(Body::Receipts(r)) = db.tables.get_mut(RECEIPTS_TABLE).map(|t| &mut t.body) {
                    r.push(Receipt { target: self.table.clone(), generation: generation.to_string(), rows });
                }
            }
            Publication::InPlaceDigest => {
                // BEGIN IMMEDIATE; re-check the kept rows; DELETE; INSERT; COMMIT.
                db.get(&self.table)?;
                if let Some(k) = keep {
                    let diff = self.kept_difference(&db, generation, k)?;
                    if diff > 0 {
                        return Err(AdapterError::verification(
                            "kept_rows_changed",
                            format!("{diff} row groups outside the window changed since the generation was built"),
                        )
                        .hint("another writer modified the target; run again"));
                    }
                }
                let (_, rows) = db.read(generation)?;
                *db.rows_mut(&self.table)? = rows;
            }
        }
        Ok(PublicationOutcome::Published)
    }

    fn publishes_direct(&self) -> bool {
        self.model == Publication::InPlaceReceipt && self.lock().direct
    }

    fn direct_identity(&self, generation: &str) -> String {
        format!("receipt:{generation}")
    }

    async fn publish_direct(&self, generation: &str, keep: Option<&RowFilter>, feed: DirectFeed) -> Result<PublicationOutcome> {
        self.publish_direct_here(generation, keep, feed).await
    }

    fn scope(&self) -> String {
        format!("mem://{}/{}", self.model.name(), self.table)
    }

    async fn identity(&self, table: TableRole<'_>) -> Result<Option<String>> {
        let name = self.name_of(table);
        self.log(TargetOp::Identity, vec![name.clone()]);
        match self.model {
            Publication::Exchange => Ok(self.lock().tables.get(&name).map(|t| format!("mem-uuid-{:08}", t.id))),
            Publication::InPlaceReceipt => {
                let db = self.lock();
                match table {
                    TableRole::Owned(n) => Ok(db.tables.contains_key(n).then(|| format!("receipt:{n}"))),
                    TableRole::Target => {
                        let latest = match db.tables.get(RECEIPTS_TABLE).map(|t| &t.body) {
                            Some(Body::Receipts(r)) => r.iter().rev().find(|r| r.target == self.table).map(|r| r.generation.clone()),
                            _ => None,
                        };
                        Ok(Some(format!("receipt:{}", latest.unwrap_or_else(|| "none".into()))))
                    }
                }
            }
            Publication::InPlaceDigest => {
                if !self.lock().tables.contains_key(&name) {
                    return Ok(None);
                }
                // Contents identify a table whose publication copies rows.
                let ncols = self.columns()?.len();
                let db = self.lock();
                let (columns, rows) = db.read(&name)?;
                let c = contents(&columns, ncols, &rows)?;
                Ok(Some(format!("rows={};digest={}", c.rows, c.digest.sum_hex())))
            }
        }
    }

    async fn owned_tables(&self) -> Result<Vec<String>> {
        self.log(TargetOp::OwnedTables, Vec::new());
        let db = self.lock();
        Ok(db.tables.keys().filter(|n| n.starts_with(dpone_core::identity::OWNED_PREFIX) && *n != RECEIPTS_TABLE).cloned().collect())
    }

    /// The claims row of PostgreSQL / SQLite: one upsert under the lock,
    /// expiry on this process's clock.
    async fn claim(&self, request: &ClaimRequest) -> Result<ClaimAttempt> {
        self.log(TargetOp::Claim, Vec::new());
        let now = now_ms();
        let mut db = self.lock();
        if let Some(current) = &db.claim
            && !current.is_free_for(request, now)
        {
            return Ok(ClaimAttempt::Held(current.holder_at(now)));
        }
        db.claim_fence += 1;
        db.claim = Some(ClaimRecord {
            holder: request.holder.clone(),
            token: request.token.clone(),
            run: String::new(),
            expires_at_ms: now + request.ttl_ms,
        });
        Ok(ClaimAttempt::Granted(TargetClaim { holder: request.holder.clone(), token: request.token.clone(), fence: db.claim_fence }))
    }

    async fn renew_claim(&self, claim: &TargetClaim, ttl_ms: u64, run: &str) -> Result<()> {
        self.log(TargetOp::RenewClaim, Vec::new());
        let now = now_ms();
        let mut db = self.lock();
        match &mut db.claim {
            Some(c) if c.token == claim.token && c.expires_at_ms > now => {
                c.expires_at_ms = now + ttl_ms;
                c.run = run.to_string();
                Ok(())
            }
            _ => Err(dpone_core::ports::claim_lost()),
        }
    }

    async fn release_claim(&self, claim: &TargetClaim) -> Result<()> {
        self.log(TargetOp::ReleaseClaim, Vec::new());
        let mut db = self.lock();
        if db.claim.as_ref().is_some_and(|c| c.token == claim.token) {
            db.claim = None;
        }
        Ok(())
    }

    async fn after_publication(&self, generation: &str, backup: &str) -> Result<()> {
        self.log(TargetOp::AfterPublication, vec![generation.to_string(), backup.to_string()]);
        if self.model != Publication::Exchange {
            return Ok(());
        }
        // After EXCHANGE the generation's name holds the previous target:
        // RENAME it to the backup, mark it, drop older backups of this target.
        let mut db = self.lock();
        let comment = format!("dpone backup of {}", self.table);
        if db.tables.contains_key(generation) {
            if db.tables.contains_key(backup) {
                return Err(table_exists(backup));
            }
            let t = db.tables.remove(generation).expect("checked");
            db.tables.insert(backup.to_string(), t);
        }
        if let Some(b) = db.tables.get_mut(backup) {
            b.comment = Some(comment.clone());
        }
        let old: Vec<String> = db
            .tables
            .iter()
            .filter(|(n, t)| n.starts_with("_dpone_bak_") && t.comment.as_deref() == Some(comment.as_str()) && *n != backup)
            .map(|(n, _)| n.clone())
            .collect();
        for o in old {
            db.tables.remove(&o);
        }
        Ok(())
    }

    async fn window_stats(&self, filter: &RowFilter) -> Result<WindowStats> {
        self.log(TargetOp::WindowStats, vec![self.table.clone()]);
        let db = self.lock();
        let (columns, rows) = db.read(&self.table)?;
        window_stats(&columns, &rows, filter)
    }

    /// `_dpone_marks`' row of the target, read outside any transaction.
    async fn read_mark(&self) -> Result<Option<StoredMark>> {
        self.log(TargetOp::Identity, vec![self.table.clone()]);
        Ok(self.lock().mark.clone())
    }

    /// One transaction, as every adapter's: the mark re-checked, the
    /// generation's rows appended, the growth checked, the mark stored.
    /// The store's lock makes it all or nothing; a failed check is a
    /// `Verification` error (a definite rollback).
    async fn publish_append(&self, publication: MarkedPublication<'_>, rows: u64) -> Result<PublicationOutcome> {
        let MarkedPublication { generation, before, after } = publication;
        self.log(TargetOp::Publish, vec![generation.to_string(), self.table.clone()]);
        self.columns()?;
        let mut db = self.lock();
        check_publication_unmoved(db.mark.as_ref(), before)?;
        let (_, batch) = db.read(generation)?;
        if batch.len() as u64 != rows {
            return Err(AdapterError::verification(
                "publication_verification_failed",
                format!("the generation {generation} holds {} rows; the verified batch holds {rows}", batch.len()),
            ));
        }
        db.rows_mut(&self.table)?.extend(batch);
        db.mark = Some(after.clone());
        Ok(PublicationOutcome::Published)
    }

    async fn check_merge(&self, generation: &str, key: &MergeKey) -> Result<MergeCounts> {
        self.log(TargetOp::Inspect, vec![generation.to_string(), self.table.clone()]);
        self.columns()?;
        let db = self.lock();
        Ok(super::merge::resolve(&db, &self.table, generation, key)?.counts())
    }

    async fn publish_merge(&self, publication: MarkedPublication<'_>, key: &MergeKey, expected: MergeCounts) -> Result<PublicationOutcome> {
        self.log(TargetOp::Publish, vec![publication.generation.to_string(), self.table.clone()]);
        self.columns()?;
        let mut db = self.lock();
        super::merge::publish(&mut db, &self.table, publication, key, expected)
    }

    /// Compare-and-set of the mark; rows untouched.
    async fn reset_mark(&self, before: Option<&StoredMark>, after: Option<&StoredMark>) -> Result<()> {
        self.log(TargetOp::Publish, vec![self.table.clone()]);
        let mut db = self.lock();
        check_reset_unmoved(db.mark.as_ref(), before)?;
        db.mark = after.cloned();
        Ok(())
    }

    async fn drop_tables(&self, names: &[String]) -> Result<()> {
        self.log(TargetOp::DropTables, names.to_vec());
        let mut db = self.lock();
        if self.model == Publication::InPlaceReceipt {
            // One implicit transaction: views first; a table that a view
            // outside `names` still reads cannot be dropped (SQLSTATE 2BP01),
            // and then nothing is.
            for n in names {
                if matches!(db.tables.get(n).map(|t| &t.body), Some(Body::Rows(_)))
                    && let Some(v) = db.views_over(n, names).first()
                {
                    return Err(AdapterError::permanent(
                        "mem_dependent_objects",
                        format!("cannot drop table `{n}` because view `{v}` depends on it"),
                    ));
                }
            }
        }
        for n in names {
            db.tables.remove(n);
        }
        Ok(())
    }
}

//! `MemTarget`: a faithful in-memory [`dpone_core::ports::Target`].
//!
//! The engine's unit tests run whole runs on it, crash them anywhere and
//! compare the final table as a multiset, so it reproduces what the engine
//! can observe of the real adapters: one of three publication models
//! ([`Publication`]), each mirroring one adapter's sink line by line (the
//! `port` module says which statement each step stands for), with the same
//! identities, generation builds, cleanup and error classes.
//!
//! Clones share one store (all tables, the call log, the configuration);
//! the adapter's own state — the columns cached by `describe`, as every
//! real adapter keeps them — belongs to each handle, and [`MemTarget::handle`]
//! makes a new one as a restarted process would. The test hooks here
//! (rows of any table, tampering, foreign tables, the call log) never show
//! up in the call log.

pub mod descriptor;
mod direct;
mod merge;
mod port;
mod store;

pub use store::{Receipt, TargetCall};

use crate::rows::{Row, encode, multiset, types_of};
use dpone_core::Diagnostic;
use dpone_core::types::Column;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use store::{Body, Db, decode_stored};

/// Name of the receipts table of the `InPlaceReceipt` model.
pub const RECEIPTS_TABLE: &str = "_dpone_receipts";

/// How a `MemTarget` publishes; each mirrors one real adapter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Publication {
    /// ClickHouse: generation = kept rows + staging rows (`Linked`), one
    /// atomic swap of target and generation, identity = table object id.
    Exchange,
    /// PostgreSQL (DELETE + INSERT): generation = a view over the stagings
    /// (`WindowOnlyView`), the window replaced in place with a receipt,
    /// identity = the latest receipt.
    InPlaceReceipt,
    /// SQLite: generation = a copy of kept + staging rows (`Copied`), one
    /// transaction re-checking the kept rows, identity = the contents.
    InPlaceDigest,
}

impl Publication {
    pub const ALL: [Publication; 3] = [Publication::Exchange, Publication::InPlaceReceipt, Publication::InPlaceDigest];

    pub fn name(self) -> &'static str {
        match self {
            Publication::Exchange => "exchange",
            Publication::InPlaceReceipt => "in_place_receipt",
            Publication::InPlaceDigest => "in_place_digest",
        }
    }
}

/// An in-memory target table and everything around it.
#[derive(Debug, Clone)]
pub struct MemTarget {
    db: Arc<Mutex<Db>>,
    model: Publication,
    table: String,
    /// Columns as of this handle's `describe`.
    described: OnceLock<Vec<Column>>,
}

impl MemTarget {
    /// A store holding the empty target table `table` with `columns`.
    pub fn new(model: Publication, table: &str, columns: Vec<Column>) -> Self {
        let mut db = Db::new();
        db.create(table, columns, Body::Rows(Vec::new())).expect("a new store is empty");
        MemTarget { db: Arc::new(Mutex::new(db)), model, table: table.to_string(), described: OnceLock::new() }
    }

    /// A store without the target table (`describe` returns None).
    pub fn without_table(model: Publication, table: &str) -> Self {
        let db = Db::new();
        MemTarget { db: Arc::new(Mutex::new(db)), model, table: table.to_string(), described: OnceLock::new() }
    }

    /// A new adapter on the same store, with nothing cached (a restarted process).
    pub fn handle(&self) -> Self {
        MemTarget { db: self.db.clone(), model: self.model, table: self.table.clone(), described: OnceLock::new() }
    }

    pub fn model(&self) -> Publication {
        self.model
    }

    /// The target table's name.
    pub fn table(&self) -> &str {
        &self.table
    }

    fn lock(&self) -> MutexGuard<'_, Db> {
        self.db.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An `InPlaceReceipt` target that publishes directly, as PostgreSQL's
    /// `publication: direct`: the chunks are loaded inside the publishing
    /// transaction (`Target::publish_direct`), no staging is created.
    pub fn set_direct(&self, on: bool) {
        assert_eq!(self.model, Publication::InPlaceReceipt, "only the receipt model publishes directly");
        self.lock().direct = on;
    }

    /// Reports `range` as the DateTime64 range of its "server" (None: the
    /// format's), as a ClickHouse server before the extended range would.
    pub fn set_datetime64_range(&self, range: Option<dpone_core::rowbinary::DateTime64Range>) {
        self.lock().datetime64_range = range;
    }

    /// When on, a direct publication inserts a copy of the first row of
    /// each chunk it loads, as a trigger of the target could: the chunk's
    /// read-back must see it.
    pub fn set_direct_tamper(&self, on: bool) {
        self.lock().direct_tamper = on;
    }

    /// Refusals `eligibility` reports (besides a missing target).
    pub fn set_refusals(&self, refusals: Vec<Diagnostic>) {
        self.lock().refusals = refusals;
    }

    /// When on, `compare_kept` reports 0 whatever the tables hold and an
    /// `InPlaceReceipt` publication does not re-check the kept rows, as
    /// PostgreSQL's did before its kept rows were fingerprinted (off by
    /// default): a target with a broken guard, for tests of the tests.
    pub fn set_compare_kept_gap(&self, on: bool) {
        self.lock().compare_kept_gap = on;
    }

    /// Every port call so far, in order.
    pub fn calls(&self) -> Vec<TargetCall> {
        self.lock().calls.clone()
    }

    /// The calls that may have changed the store.
    pub fn writes(&self) -> Vec<TargetCall> {
        self.calls().into_iter().filter(|c| c.op.writes()).collect()
    }

    pub fn clear_calls(&self) {
        self.lock().calls.clear();
    }

    /// Every table, view and receipts table, by name.
    pub fn tables(&self) -> Vec<String> {
        self.lock().tables.keys().cloned().collect()
    }

    pub fn has_table(&self, name: &str) -> bool {
        self.lock().tables.contains_key(name)
    }

    /// The object id of `name` (moves with the table on rename/exchange).
    pub fn table_id(&self, name: &str) -> Option<u64> {
        self.lock().tables.get(name).map(|t| t.id)
    }

    /// A table's comment (the Exchange model marks backups with one).
    pub fn comment(&self, name: &str) -> Option<String> {
        self.lock().tables.get(name).and_then(|t| t.comment.clone())
    }

    /// Whether `name` is a view (the InPlaceReceipt generation).
    pub fn is_view(&self, name: &str) -> bool {
        matches!(self.lock().tables.get(name).map(|t| &t.body), Some(Body::View(_)))
    }

    /// Receipts of the InPlaceReceipt model, oldest first.
    /// The stored `incremental_append` mark (test hook: not logged).
    pub fn mark(&self) -> Option<dpone_core::incremental::StoredMark> {
        self.lock().mark.clone()
    }

    /// Moves the stored mark as another writer would (test hook).
    pub fn set_mark(&self, mark: Option<dpone_core::incremental::StoredMark>) {
        self.lock().mark = mark;
    }

    pub fn receipts(&self) -> Vec<Receipt> {
        match self.lock().tables.get(RECEIPTS_TABLE).map(|t| &t.body) {
            Some(Body::Receipts(r)) => r.clone(),
            _ => Vec::new(),
        }
    }

    /// Records a receipt for this target as another writer's publication
    /// would (InPlaceReceipt): the target's identity becomes `generation`.
    pub fn add_foreign_receipt(&self, generation: &str) {
        let mut db = self.lock();
        let table = self.table.clone();
        if !db.tables.contains_key(RECEIPTS_TABLE) {
            db.create(RECEIPTS_TABLE, Vec::new(), Body::Receipts(Vec::new())).expect("a new receipts table");
        }
        if let Some(Body::Receipts(r)) = db.tables.get_mut(RECEIPTS_TABLE).map(|t| &mut t.body) {
            r.push(Receipt { target: table, generation: generation.to_string(), rows: 0 });
        }
    }

    /// Rows of `name` (a view's rows are read through it) as a sorted multiset.
    ///
    /// # Panics
    /// When `name` does not exist or holds undecodable rows.
    pub fn rows(&self, name: &str) -> Vec<Row> {
        self.try_rows(name).unwrap_or_else(|| panic!("MemTarget has no table `{name}` (tables: {:?})", self.tables()))
    }

    /// Like [`Self::rows`], None when `name` does not exist.
    pub fn try_rows(&self, name: &str) -> Option<Vec<Row>> {
        let db = self.lock();
        db.tables.get(name)?;
        let (columns, rows) = db.read(name).unwrap_or_else(|e| panic!("reading `{name}`: {}", e.message));
        Some(multiset(rows.iter().map(|r| decode_stored(&columns, r).unwrap_or_else(|e| panic!("`{name}`: {}", e.message)))))
    }

    /// Rows of the target table.
    pub fn target_rows(&self) -> Vec<Row> {
        self.rows(&self.table)
    }

    /// Every table's rows (views read through; receipts left out), for
    /// "nothing changed" assertions.
    pub fn contents(&self) -> BTreeMap<String, Vec<Row>> {
        let names: Vec<String> = {
            let db = self.lock();
            db.tables.iter().filter(|(_, t)| !matches!(t.body, Body::Receipts(_))).map(|(n, _)| n.clone()).collect()
        };
        names.into_iter().filter_map(|n| self.try_rows(&n).map(|r| (n, r))).collect()
    }

    fn with_rows<R>(&self, name: &str, f: impl FnOnce(&[Column], &mut Vec<Vec<u8>>) -> R) -> R {
        let mut db = self.lock();
        let columns = db.get(name).unwrap_or_else(|e| panic!("{}", e.message)).columns.clone();
        let rows = db.rows_mut(name).unwrap_or_else(|e| panic!("{}", e.message));
        f(&columns, rows)
    }

    /// Appends rows to `name` (another writer, or setting up a test).
    ///
    /// # Panics
    /// When the table is missing or a value does not fit its column.
    pub fn insert_rows(&self, name: &str, rows: &[Row]) {
        self.with_rows(name, |columns, stored| {
            let types = types_of(columns);
            for r in rows {
                stored.push(encode(&types, r).unwrap_or_else(|e| panic!("row {r:?} does not fit `{name}`: {e}")));
            }
        })
    }

    /// Deletes the rows of `name` that `pred` selects; returns how many.
    pub fn delete_rows(&self, name: &str, mut pred: impl FnMut(&Row) -> bool) -> usize {
        self.with_rows(name, |columns, stored| {
            let before = stored.len();
            stored.retain(|b| !pred(&decode_stored(columns, b).expect("stored rows decode")));
            before - stored.len()
        })
    }

    /// Rewrites every row of `name` through `f`, in place; returns how many changed.
    pub fn update_rows(&self, name: &str, mut f: impl FnMut(&mut Row)) -> usize {
        self.with_rows(name, |columns, stored| {
            let types = types_of(columns);
            let mut changed = 0;
            for b in stored.iter_mut() {
                let mut row = decode_stored(columns, b).expect("stored rows decode");
                f(&mut row);
                let new = encode(&types, &row).unwrap_or_else(|e| panic!("updated row {row:?} does not fit `{name}`: {e}"));
                if new != *b {
                    *b = new;
                    changed += 1;
                }
            }
            changed
        })
    }

    /// Replaces every row of `name`.
    pub fn replace_rows(&self, name: &str, rows: &[Row]) {
        self.with_rows(name, |_, stored| stored.clear());
        self.insert_rows(name, rows);
    }

    /// Creates a table outside any run (a foreign `_dpone_` table, or a user table).
    ///
    /// # Panics
    /// When `name` exists.
    pub fn create_table(&self, name: &str, columns: Vec<Column>) {
        self.lock().create(name, columns, Body::Rows(Vec::new())).unwrap_or_else(|e| panic!("{}", e.message));
    }

    /// Creates a table shaped like the target (e.g. another run's staging).
    pub fn create_foreign_table(&self, name: &str) {
        let columns = self.lock().get(&self.table).unwrap_or_else(|e| panic!("{}", e.message)).columns.clone();
        self.create_table(name, columns);
    }

    /// Drops a table or view by hand; returns whether it existed.
    pub fn drop_table(&self, name: &str) -> bool {
        self.lock().tables.remove(name).is_some()
    }
}

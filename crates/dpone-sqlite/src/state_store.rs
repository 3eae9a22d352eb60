//! The state store on SQLite: leases with fences, revisioned records.
//!
//! One file under `runtime.storage.work_dir` (`state.db`), in WAL mode with
//! `synchronous = FULL` so a committed write survives power loss. Every
//! write runs in `BEGIN IMMEDIATE`, which takes the database's write lock
//! before reading, so the lease check and the write are one atomic step
//! across processes sharing the file.
//!
//! Limitation: the lease excludes only processes that use the same state
//! file; it cannot stop writers outside dpone or dpone runs with another
//! work dir (see docs/recovery.md).

use dpone_core::state::{Lease, StateStore, StoreError, Versioned};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub struct SqliteStateStore {
    conn: Mutex<Connection>,
}

fn io(e: rusqlite::Error) -> StoreError {
    StoreError::Io(e.to_string())
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

impl SqliteStateStore {
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| StoreError::Io(format!("creating {}: {e}", dir.display())))?;
        }
        let conn = Connection::open(path).map_err(io)?;
        conn.busy_timeout(Duration::from_secs(30)).map_err(io)?;
        conn.execute_batch(
            "PRAGMA journal_mode = WAL;
             PRAGMA synchronous = FULL;
             CREATE TABLE IF NOT EXISTS leases (
                 scope TEXT PRIMARY KEY,
                 holder TEXT NOT NULL,
                 fence INTEGER NOT NULL,
                 expires_at_ms INTEGER NOT NULL);
             CREATE TABLE IF NOT EXISTS records (
                 key TEXT PRIMARY KEY,
                 revision INTEGER NOT NULL,
                 body TEXT NOT NULL);",
        )
        .map_err(io)?;
        Ok(SqliteStateStore { conn: Mutex::new(conn) })
    }

    fn with_tx<T>(&self, f: impl FnOnce(&rusqlite::Transaction) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let mut conn = self.conn.lock().map_err(|_| StoreError::Io("state store lock poisoned".into()))?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(io)?;
        let out = f(&tx)?;
        tx.commit().map_err(io)?;
        Ok(out)
    }
}

/// Fails unless `lease` is the scope's current, unexpired lease.
fn check_lease(tx: &rusqlite::Transaction, lease: &Lease, now: u64) -> Result<(), StoreError> {
    let row: Option<(String, u64, u64)> = tx
        .query_row("SELECT holder, fence, expires_at_ms FROM leases WHERE scope = ?1", [&lease.scope], |r| {
            Ok((r.get(0)?, r.get::<_, i64>(1)? as u64, r.get::<_, i64>(2)? as u64))
        })
        .optional()
        .map_err(io)?;
    match row {
        Some((holder, fence, expires)) if holder == lease.holder && fence == lease.fence && expires > now => Ok(()),
        _ => Err(StoreError::LeaseLost(lease.scope.clone())),
    }
}

/// The lease row of a scope: holder, fence, expiry.
type LeaseRow = (String, u64, u64);

impl SqliteStateStore {
    /// In one transaction: reads the scope's lease row, asks `fence` for the
    /// new lease's fence (or a refusal) given that row and the time, and
    /// stores the lease of `holder` with it.
    fn store_lease(
        &self,
        scope: &str,
        holder: &str,
        ttl_ms: u64,
        fence: impl FnOnce(Option<LeaseRow>, u64) -> Result<u64, StoreError>,
    ) -> Result<Lease, StoreError> {
        let now = now_ms();
        self.with_tx(|tx| {
            let row: Option<LeaseRow> = tx
                .query_row("SELECT holder, fence, expires_at_ms FROM leases WHERE scope = ?1", [scope], |r| {
                    Ok((r.get(0)?, r.get::<_, i64>(1)? as u64, r.get::<_, i64>(2)? as u64))
                })
                .optional()
                .map_err(io)?;
            let fence = fence(row, now)?;
            tx.execute(
                "INSERT INTO leases (scope, holder, fence, expires_at_ms) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT(scope) DO UPDATE SET holder = excluded.holder, fence = excluded.fence, expires_at_ms = excluded.expires_at_ms",
                params![scope, holder, fence as i64, (now + ttl_ms) as i64],
            )
            .map_err(io)?;
            Ok(Lease { scope: scope.to_string(), holder: holder.to_string(), fence })
        })
    }
}

impl StateStore for SqliteStateStore {
    fn acquire(&self, scope: &str, holder: &str, ttl_ms: u64) -> Result<Lease, StoreError> {
        self.store_lease(scope, holder, ttl_ms, |row, now| match row {
            Some((other, _, expires)) if expires > now && other != holder => {
                Err(StoreError::Held { scope: scope.to_string(), holder: other, remaining_ms: expires - now })
            }
            Some((_, fence, _)) => Ok(fence + 1),
            None => Ok(1),
        })
    }

    fn take_over(&self, scope: &str, stale_holder: &str, holder: &str, ttl_ms: u64) -> Result<Lease, StoreError> {
        self.store_lease(scope, holder, ttl_ms, |row, now| match row {
            Some((current, fence, _)) if current == stale_holder => Ok(fence + 1),
            Some((current, _, expires)) if expires > now => {
                Err(StoreError::Held { scope: scope.to_string(), holder: current, remaining_ms: expires - now })
            }
            Some((_, fence, _)) => Ok(fence + 1),
            None => Ok(1),
        })
    }

    fn renew(&self, lease: &Lease, ttl_ms: u64) -> Result<(), StoreError> {
        let now = now_ms();
        self.with_tx(|tx| {
            check_lease(tx, lease, now)?;
            tx.execute("UPDATE leases SET expires_at_ms = ?2 WHERE scope = ?1", params![lease.scope, (now + ttl_ms) as i64]).map_err(io)?;
            Ok(())
        })
    }

    fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        self.with_tx(|tx| {
            // Expire rather than delete: the fence must keep growing.
            tx.execute(
                "UPDATE leases SET expires_at_ms = 0 WHERE scope = ?1 AND holder = ?2 AND fence = ?3",
                params![lease.scope, lease.holder, lease.fence as i64],
            )
            .map_err(io)?;
            Ok(())
        })
    }

    fn get(&self, key: &str) -> Result<Option<Versioned>, StoreError> {
        let conn = self.conn.lock().map_err(|_| StoreError::Io("state store lock poisoned".into()))?;
        conn.query_row("SELECT revision, body FROM records WHERE key = ?1", [key], |r| {
            Ok(Versioned { revision: r.get::<_, i64>(0)? as u64, body: r.get(1)? })
        })
        .optional()
        .map_err(io)
    }

    fn compare_and_set(&self, lease: &Lease, key: &str, expected: Option<u64>, body: &str) -> Result<u64, StoreError> {
        let now = now_ms();
        self.with_tx(|tx| {
            check_lease(tx, lease, now)?;
            let found: Option<u64> = tx
                .query_row("SELECT revision FROM records WHERE key = ?1", [key], |r| r.get::<_, i64>(0))
                .optional()
                .map_err(io)?
                .map(|v| v as u64);
            if found != expected {
                return Err(StoreError::Conflict { key: key.to_string(), expected, found });
            }
            let next = found.unwrap_or(0) + 1;
            tx.execute(
                "INSERT INTO records (key, revision, body) VALUES (?1, ?2, ?3)
                 ON CONFLICT(key) DO UPDATE SET revision = excluded.revision, body = excluded.body",
                params![key, next as i64, body],
            )
            .map_err(io)?;
            Ok(next)
        })
    }

    fn keys(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        let conn = self.conn.lock().map_err(|_| StoreError::Io("state store lock poisoned".into()))?;
        let mut stmt = conn.prepare("SELECT key FROM records WHERE substr(key, 1, length(?1)) = ?1 ORDER BY key").map_err(io)?;
        let rows = stmt.query_map([prefix], |r| r.get::<_, String>(0)).map_err(io)?;
        rows.collect::<rusqlite::Result<Vec<_>>>().map_err(io)
    }
}

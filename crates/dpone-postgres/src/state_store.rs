//! The state store on PostgreSQL: leases with fences and revisioned
//! records in one database that every host running dpone can reach, so a
//! run excludes runs of other hosts and a retried task on another machine
//! resumes the journal of the attempt that died.
//!
//! # How the contract is enforced
//!
//! - Time is the **server's** (`clock_timestamp()`), never a client's:
//!   expiry is decided by one clock, whatever the hosts' clocks say. (The
//!   engine's local lease check only uses durations measured on its own
//!   host, which end before the server's expiry.)
//! - `acquire` / `take_over` are one `INSERT .. ON CONFLICT (scope) DO
//!   UPDATE .. WHERE <free or ours>` statement: the conflicting row is
//!   locked, the condition re-read on its latest version, and the fence
//!   grows by one on every grant (a release only expires the lease).
//! - `compare_and_set` is one transaction: `SELECT .. FOR SHARE` of the
//!   lease row requiring holder, fence and `expires_at > clock_timestamp()`,
//!   then a conditional `UPDATE .. WHERE revision = expected` (or `INSERT ..
//!   ON CONFLICT DO NOTHING` for a new record). The share lock conflicts
//!   with the row lock every grant takes, so no new fence can be issued
//!   between the check and the commit: a write commits only under the
//!   scope's current lease. Concurrent writers of one revision serialize on
//!   the record's row lock; READ COMMITTED re-evaluates the losers'
//!   `revision = expected` on the committed row, so exactly one wins.
//! - `renew` is `UPDATE .. WHERE holder, fence and not expired`.
//!
//! # Execution model
//!
//! The `StateStore` trait is synchronous and is called from plain threads,
//! blocking pools and async tasks alike, so the connection lives on a
//! thread of its own with a single-threaded runtime; calls are handed to
//! it through a channel and wait for the answer. Each call has a timeout
//! ([`CALL_TIMEOUT`]); a broken connection is reopened on the next call,
//! so a store that comes back is used again. Any failure is
//! [`StoreError::Io`]: the engine stops the run and keeps its journal.

mod schema;

pub use schema::{MAX_NAME_BYTES, MIGRATIONS, SCHEMA_VERSION, Tables};

use crate::tls::PgTls;
use dpone_core::Diagnostic;
use dpone_core::manifest::{Manifest, StateConnection, StateSpec};
use dpone_core::ports::Wiring;
use dpone_core::state::{Lease, StateStore, StoreError, Versioned};
use std::time::Duration;
use tokio_postgres::Client;

/// Longest a call waits for the server (connecting included).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A handle on a PostgreSQL state store; each handle has its own connection.
pub struct PostgresStateStore {
    jobs: tokio::sync::mpsc::UnboundedSender<Job>,
    location: String,
}

impl std::fmt::Debug for PostgresStateStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStateStore").field("location", &self.location).finish()
    }
}

enum Op {
    Open { create: bool, up_to: u32 },
    Acquire { scope: String, holder: String, ttl_ms: u64, stale: Option<String> },
    Renew { lease: Lease, ttl_ms: u64 },
    Release { lease: Lease },
    Get { key: String },
    Cas { lease: Lease, key: String, expected: Option<u64>, body: String },
    Keys { prefix: String },
    Version,
}

enum Reply {
    Opened(bool),
    Lease(Lease),
    Done,
    Record(Option<Versioned>),
    Revision(u64),
    Keys(Vec<String>),
    Version(u32),
}

struct Job {
    op: Op,
    reply: std::sync::mpsc::SyncSender<Result<Reply, StoreError>>,
}

impl PostgresStateStore {
    /// Connects and brings the tables `schema.name` to [`SCHEMA_VERSION`]
    /// (creating them with `create`); without `create`, a store whose
    /// tables do not exist yet is `None` (nothing is created).
    pub fn open(config: tokio_postgres::Config, tls: PgTls, schema: &str, name: &str, create: bool) -> Result<Option<Self>, StoreError> {
        Self::open_at(config, tls, schema, name, create, SCHEMA_VERSION)
    }

    /// [`Self::open`], migrating only up to `version` (tests of migrations).
    #[doc(hidden)]
    pub fn open_at(
        mut config: tokio_postgres::Config,
        tls: PgTls,
        schema: &str,
        name: &str,
        create: bool,
        version: u32,
    ) -> Result<Option<Self>, StoreError> {
        Tables::validate(schema, name).map_err(StoreError::Io)?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        if config.get_application_name().is_none() {
            config.application_name("dpone state");
        }
        let location = describe(&config, schema, name);
        let worker = Worker { config, tls, tables: Tables::new(schema, name), client: None };
        let (jobs, rx) = tokio::sync::mpsc::unbounded_channel();
        std::thread::Builder::new()
            .name("dpone-state-pg".into())
            .spawn(move || worker.serve(rx))
            .map_err(|e| StoreError::Io(format!("starting the state store's thread: {e}")))?;
        let store = PostgresStateStore { jobs, location };
        match store.call(Op::Open { create, up_to: version.min(SCHEMA_VERSION) })? {
            Reply::Opened(true) => Ok(Some(store)),
            _ => Ok(None),
        }
    }

    /// `postgres://host:port/db#schema.name` (no credentials).
    pub fn location(&self) -> &str {
        &self.location
    }

    /// The layout version the store's tables are at.
    pub fn schema_version(&self) -> Result<u32, StoreError> {
        match self.call(Op::Version)? {
            Reply::Version(v) => Ok(v),
            _ => Err(unexpected()),
        }
    }

    fn call(&self, op: Op) -> Result<Reply, StoreError> {
        let gone = || StoreError::Io("the state store's connection thread stopped".into());
        let (reply, answer) = std::sync::mpsc::sync_channel(1);
        self.jobs.send(Job { op, reply }).map_err(|_| gone())?;
        answer.recv().map_err(|_| gone())?
    }
}

/// Where a PostgreSQL state store is and how to reach it; built without I/O.
#[derive(Clone)]
pub struct StateLocation {
    pub config: tokio_postgres::Config,
    pub tls: PgTls,
    pub schema: String,
    pub name: String,
}

impl std::fmt::Debug for StateLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

impl StateLocation {
    /// The manifest's `state:` block when it names a postgres store
    /// (`connection`, or `reuse: sink`); None for any other state.
    pub fn from_manifest(manifest: &Manifest, wiring: &Wiring) -> Result<Option<Self>, Diagnostic> {
        let Some(StateSpec::Postgres { connection, table }) = &manifest.state else { return Ok(None) };
        let (config, tls) = match connection {
            StateConnection::Own(spec) => crate::config::resolve(spec, "state.connection", wiring.base_dir, wiring.env)?,
            StateConnection::Sink => crate::config::resolve(&manifest.sink.connection, "sink.connection", wiring.base_dir, wiring.env)?,
        };
        let schema = table.schema.clone().unwrap_or_else(|| dpone_core::manifest::model::DEFAULT_STATE_SCHEMA.into());
        Self::new(config, tls, schema, table.name.clone(), "state.table").map(Some)
    }

    /// `url` (from the environment variable `var`) in the default tables
    /// `dpone.dpone_state`.
    pub fn from_url(var: &str, url: &str, base: &std::path::Path) -> Result<Self, Diagnostic> {
        let (config, tls) = crate::config::resolve_url(var, url, base)?;
        use dpone_core::manifest::model::{DEFAULT_STATE_SCHEMA, DEFAULT_STATE_TABLE};
        Self::new(config, tls, DEFAULT_STATE_SCHEMA.into(), DEFAULT_STATE_TABLE.into(), var)
    }

    fn new(config: tokio_postgres::Config, tls: PgTls, schema: String, name: String, at: &str) -> Result<Self, Diagnostic> {
        Tables::validate(&schema, &name).map_err(|why| {
            Diagnostic::new("invalid_value", at, why).hint(format!("name the state table with at most {MAX_NAME_BYTES} bytes"))
        })?;
        if config.get_hosts().is_empty() {
            return Err(Diagnostic::new("missing_key", at, "the state store's connection names no host").hint("add the host"));
        }
        Ok(StateLocation { config, tls, schema, name })
    }

    /// Opens the store (see [`PostgresStateStore::open`]).
    pub fn open(&self, create: bool) -> Result<Option<PostgresStateStore>, StoreError> {
        PostgresStateStore::open(self.config.clone(), self.tls.clone(), &self.schema, &self.name, create)
    }

    /// `postgres://host:port/db#schema.name` (no credentials).
    pub fn describe(&self) -> String {
        describe(&self.config, &self.schema, &self.name)
    }
}

fn unexpected() -> StoreError {
    StoreError::Io("the state store's thread gave an unexpected answer".into())
}

fn describe(config: &tokio_postgres::Config, schema: &str, name: &str) -> String {
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        #[cfg(unix)]
        Some(tokio_postgres::config::Host::Unix(p)) => p.display().to_string(),
        None => String::new(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!("postgres://{host}:{port}/{}#{schema}.{name}", config.get_dbname().unwrap_or(""))
}

impl StateStore for PostgresStateStore {
    fn acquire(&self, scope: &str, holder: &str, ttl_ms: u64) -> Result<Lease, StoreError> {
        match self.call(Op::Acquire { scope: scope.into(), holder: holder.into(), ttl_ms, stale: None })? {
            Reply::Lease(l) => Ok(l),
            _ => Err(unexpected()),
        }
    }

    fn take_over(&self, scope: &str, stale_holder: &str, holder: &str, ttl_ms: u64) -> Result<Lease, StoreError> {
        match self.call(Op::Acquire { scope: scope.into(), holder: holder.into(), ttl_ms, stale: Some(stale_holder.into()) })? {
            Reply::Lease(l) => Ok(l),
            _ => Err(unexpected()),
        }
    }

    fn renew(&self, lease: &Lease, ttl_ms: u64) -> Result<(), StoreError> {
        self.call(Op::Renew { lease: lease.clone(), ttl_ms }).map(|_| ())
    }

    fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        self.call(Op::Release { lease: lease.clone() }).map(|_| ())
    }

    fn get(&self, key: &str) -> Result<Option<Versioned>, StoreError> {
        match self.call(Op::Get { key: key.into() })? {
            Reply::Record(r) => Ok(r),
            _ => Err(unexpected()),
        }
    }

    fn compare_and_set(&self, lease: &Lease, key: &str, expected: Option<u64>, body: &str) -> Result<u64, StoreError> {
        match self.call(Op::Cas { lease: lease.clone(), key: key.into(), expected, body: body.into() })? {
            Reply::Revision(r) => Ok(r),
            _ => Err(unexpected()),
        }
    }

    fn keys(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        match self.call(Op::Keys { prefix: prefix.into() })? {
            Reply::Keys(k) => Ok(k),
            _ => Err(unexpected()),
        }
    }
}

/// The connection's thread.
struct Worker {
    config: tokio_postgres::Config,
    tls: PgTls,
    tables: Tables,
    client: Option<Client>,
}

/// A server error as the store reports it (the driver's messages carry no password).
fn io(context: &str, e: tokio_postgres::Error) -> StoreError {
    StoreError::Io(crate::error::classify(context, e).message)
}

impl Worker {
    fn serve(mut self, mut rx: tokio::sync::mpsc::UnboundedReceiver<Job>) {
        let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(rt) => rt,
            Err(e) => {
                // Every call then fails: the handle reports the cause.
                while let Some(job) = rx.blocking_recv() {
                    let _ = job.reply.send(Err(StoreError::Io(format!("the state store's runtime did not start: {e}"))));
                }
                return;
            }
        };
        rt.block_on(async move {
            while let Some(job) = rx.recv().await {
                let result = match tokio::time::timeout(CALL_TIMEOUT, self.run(job.op)).await {
                    Ok(r) => r,
                    Err(_) => Err(StoreError::Io(format!("the state store did not answer within {} s", CALL_TIMEOUT.as_secs()))),
                };
                if result.is_err() {
                    // The connection may be broken or mid-transaction: a new one next time.
                    self.client = None;
                }
                let _ = job.reply.send(result);
            }
        });
    }

    async fn client(&mut self) -> Result<&mut Client, StoreError> {
        if self.client.as_ref().is_none_or(Client::is_closed) {
            let c = crate::tls::connect(&self.config, &self.tls, "connecting to the state store")
                .await
                .map_err(|e| StoreError::Io(e.message))?;
            self.client = Some(c);
        }
        Ok(self.client.as_mut().expect("just connected"))
    }

    async fn run(&mut self, op: Op) -> Result<Reply, StoreError> {
        match op {
            Op::Open { create, up_to } => self.open(create, up_to).await.map(Reply::Opened),
            Op::Version => self.version().await.map(Reply::Version),
            Op::Acquire { scope, holder, ttl_ms, stale } => self.grant(&scope, &holder, ttl_ms, stale.as_deref()).await.map(Reply::Lease),
            Op::Renew { lease, ttl_ms } => self.renew(&lease, ttl_ms).await.map(|_| Reply::Done),
            Op::Release { lease } => self.release(&lease).await.map(|_| Reply::Done),
            Op::Get { key } => self.get(&key).await.map(Reply::Record),
            Op::Cas { lease, key, expected, body } => self.cas(&lease, &key, expected, &body).await.map(Reply::Revision),
            Op::Keys { prefix } => self.keys(&prefix).await.map(Reply::Keys),
        }
    }

    /// Creates or migrates the tables; false when they do not exist and
    /// `create` is not set.
    async fn open(&mut self, create: bool, up_to: u32) -> Result<bool, StoreError> {
        let t = self.tables.clone();
        let client = self.client().await?;
        let regclass = t.migrations.clone();
        let exists: bool = client
            .query_one("SELECT to_regclass($1) IS NOT NULL", &[&regclass])
            .await
            .map_err(|e| io("reading the state store", e))?
            .get(0);
        if !exists && !create {
            return Ok(false);
        }
        let tx = client.transaction().await.map_err(|e| io("migrating the state store", e))?;
        let fail = |e| io("migrating the state store", e);
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&t.lock_key]).await.map_err(fail)?;
        let has_schema: bool =
            tx.query_one("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", &[&t.schema]).await.map_err(fail)?.get(0);
        if !has_schema {
            tx.batch_execute(&format!("CREATE SCHEMA {}", schema::quote(&t.schema))).await.map_err(fail)?;
        }
        tx.batch_execute(&t.bootstrap_sql()).await.map_err(fail)?;
        let current: i32 =
            tx.query_one(&format!("SELECT coalesce(max(version), 0) FROM {}", t.migrations), &[]).await.map_err(fail)?.get(0);
        let current = current as u32;
        if current > SCHEMA_VERSION {
            return Err(StoreError::Io(format!(
                "the state store {}.{} is at layout version {current}, newer than this dpone knows ({SCHEMA_VERSION}); \
                 run a dpone at least as new as the one that migrated it",
                t.schema, t.name
            )));
        }
        let by = format!("dpone {}", env!("CARGO_PKG_VERSION"));
        for v in current + 1..=up_to {
            tx.batch_execute(&t.migration_sql(v)).await.map_err(fail)?;
            let description = MIGRATIONS[(v - 1) as usize].0;
            tx.execute(
                &format!("INSERT INTO {} (version, description, applied_by) VALUES ($1, $2, $3)", t.migrations),
                &[&(v as i32), &description, &by],
            )
            .await
            .map_err(fail)?;
        }
        tx.commit().await.map_err(fail)?;
        Ok(true)
    }

    async fn version(&mut self) -> Result<u32, StoreError> {
        let sql = format!("SELECT coalesce(max(version), 0) FROM {}", self.tables.migrations);
        let v: i32 = self.client().await?.query_one(&sql, &[]).await.map_err(|e| io("reading the state store", e))?.get(0);
        Ok(v as u32)
    }

    /// `acquire` (stale None) or `take_over`: granted when the scope is
    /// free, expired, or held by `stale` (else by `holder` itself).
    async fn grant(&mut self, scope: &str, holder: &str, ttl_ms: u64, stale: Option<&str>) -> Result<Lease, StoreError> {
        let l = self.tables.leases.clone();
        let upsert = format!(
            "INSERT INTO {l} AS l (scope, holder, fence, expires_at, acquired_at, renewed_at)
             VALUES ($1, $2, 1, clock_timestamp() + $3::bigint * interval '1 millisecond', clock_timestamp(), clock_timestamp())
             ON CONFLICT (scope) DO UPDATE SET holder = EXCLUDED.holder, fence = l.fence + 1, expires_at = EXCLUDED.expires_at,
                 acquired_at = EXCLUDED.acquired_at, renewed_at = EXCLUDED.renewed_at
             WHERE l.expires_at <= clock_timestamp() OR l.holder = $4
             RETURNING fence"
        );
        let current = format!(
            "SELECT holder, CASE WHEN expires_at > clock_timestamp()
                 THEN ceil(extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint ELSE 0 END
             FROM {l} WHERE scope = $1"
        );
        let ttl = ttl_ms.min(i64::MAX as u64) as i64;
        let allowed = stale.unwrap_or(holder);
        let client = self.client().await?;
        // A holder that releases between the two statements makes the
        // scope free: ask again (bounded; a scope cannot keep flipping).
        for _ in 0..5 {
            let fail = |e| io("acquiring the lease", e);
            if let Some(row) = client.query_opt(&upsert, &[&scope, &holder, &ttl, &allowed]).await.map_err(fail)? {
                let fence: i64 = row.get(0);
                return Ok(Lease { scope: scope.to_string(), holder: holder.to_string(), fence: fence as u64 });
            }
            if let Some(row) = client.query_opt(&current, &[&scope]).await.map_err(fail)? {
                let (other, remaining): (String, i64) = (row.get(0), row.get(1));
                if remaining > 0 {
                    return Err(StoreError::Held { scope: scope.to_string(), holder: other, remaining_ms: remaining as u64 });
                }
            }
        }
        Err(StoreError::Io(format!("the lease on `{scope}` changed hands while it was being acquired; try again")))
    }

    async fn renew(&mut self, lease: &Lease, ttl_ms: u64) -> Result<(), StoreError> {
        let sql = format!(
            "UPDATE {} SET expires_at = clock_timestamp() + $4::bigint * interval '1 millisecond', renewed_at = clock_timestamp()
             WHERE scope = $1 AND holder = $2 AND fence = $3 AND expires_at > clock_timestamp()",
            self.tables.leases
        );
        let ttl = ttl_ms.min(i64::MAX as u64) as i64;
        let n = self
            .client()
            .await?
            .execute(&sql, &[&lease.scope, &lease.holder, &(lease.fence as i64), &ttl])
            .await
            .map_err(|e| io("renewing the lease", e))?;
        if n == 1 { Ok(()) } else { Err(StoreError::LeaseLost(lease.scope.clone())) }
    }

    async fn release(&mut self, lease: &Lease) -> Result<(), StoreError> {
        // Expire rather than delete: the fence must keep growing.
        let sql = format!(
            "UPDATE {} SET expires_at = clock_timestamp() - interval '1 millisecond' WHERE scope = $1 AND holder = $2 AND fence = $3",
            self.tables.leases
        );
        self.client()
            .await?
            .execute(&sql, &[&lease.scope, &lease.holder, &(lease.fence as i64)])
            .await
            .map_err(|e| io("releasing the lease", e))?;
        Ok(())
    }

    async fn get(&mut self, key: &str) -> Result<Option<Versioned>, StoreError> {
        let sql = format!("SELECT revision, body FROM {} WHERE key = $1", self.tables.records);
        let row = self.client().await?.query_opt(&sql, &[&key]).await.map_err(|e| io("reading the state store", e))?;
        Ok(row.map(|r| Versioned { revision: r.get::<_, i64>(0) as u64, body: r.get(1) }))
    }

    async fn cas(&mut self, lease: &Lease, key: &str, expected: Option<u64>, body: &str) -> Result<u64, StoreError> {
        let (l, r) = (self.tables.leases.clone(), self.tables.records.clone());
        let fence = lease.fence as i64;
        let client = self.client().await?;
        let fail = |e| io("writing the state store", e);
        let tx = client.transaction().await.map_err(fail)?;
        // The share lock holds off every grant (they lock the row for
        // update) until this transaction ends: no new fence in between.
        let live = tx
            .query_opt(
                &format!("SELECT 1 FROM {l} WHERE scope = $1 AND holder = $2 AND fence = $3 AND expires_at > clock_timestamp() FOR SHARE"),
                &[&lease.scope, &lease.holder, &fence],
            )
            .await
            .map_err(fail)?;
        if live.is_none() {
            tx.rollback().await.map_err(fail)?;
            return Err(StoreError::LeaseLost(lease.scope.clone()));
        }
        let written = match expected {
            None => {
                let sql = format!(
                    "INSERT INTO {r} (key, revision, body, written_by, fence, written_at)
                     VALUES ($1, 1, $2, $3, $4, clock_timestamp()) ON CONFLICT (key) DO NOTHING RETURNING revision"
                );
                tx.query_opt(&sql, &[&key, &body, &lease.holder, &fence]).await.map_err(fail)?
            }
            Some(rev) => {
                let sql = format!(
                    "UPDATE {r} SET revision = revision + 1, body = $3, written_by = $4, fence = $5, written_at = clock_timestamp()
                     WHERE key = $1 AND revision = $2 RETURNING revision"
                );
                tx.query_opt(&sql, &[&key, &(rev as i64), &body, &lease.holder, &fence]).await.map_err(fail)?
            }
        };
        match written {
            Some(row) => {
                let revision: i64 = row.get(0);
                tx.commit().await.map_err(fail)?;
                Ok(revision as u64)
            }
            None => {
                let found = tx
                    .query_opt(&format!("SELECT revision FROM {r} WHERE key = $1"), &[&key])
                    .await
                    .map_err(fail)?
                    .map(|row| row.get::<_, i64>(0) as u64);
                tx.rollback().await.map_err(fail)?;
                Err(StoreError::Conflict { key: key.to_string(), expected, found })
            }
        }
    }

    async fn keys(&mut self, prefix: &str) -> Result<Vec<String>, StoreError> {
        let pattern = format!("{}%", prefix.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_"));
        // Byte order, as the SQLite store lists keys.
        let sql = format!("SELECT key FROM {} WHERE key LIKE $1 ESCAPE '\\' ORDER BY key COLLATE \"C\"", self.tables.records);
        let rows = self.client().await?.query(&sql, &[&pattern]).await.map_err(|e| io("listing the state store", e))?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }
}

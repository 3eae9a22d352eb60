//! Which state store a command uses, and opening it.
//!
//! In order: the manifest's `state:` block (`type: sqlite` or `type:
//! postgres`); else `DPONE_STATE_URL` (a PostgreSQL URL, tables
//! `dpone.dpone_state`); else SQLite in the work dir (`state.db`). A
//! manifest with a `state:` block while `DPONE_STATE_URL` is set is
//! refused: two processes of one target must never pick different stores
//! (their leases would not exclude each other) because of an environment.

use crate::redact::Secrets;
use dpone_core::Diagnostic;
use dpone_core::manifest::{Manifest, StateSpec};
use dpone_core::ports::{AdapterError, Wiring};
use dpone_core::state::{Lease, StateStore, StoreError, Versioned};
use dpone_postgres::state_store::StateLocation;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The environment variable that selects a shared state store.
pub const STATE_URL_ENV: &str = "DPONE_STATE_URL";

/// Where a state store is (made once per command: sizes do not matter).
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)]
pub enum Store {
    /// `state.db` in the work dir.
    Sqlite(PathBuf),
    Postgres(StateLocation),
}

/// The state store a manifest's commands use, and the manifest's secrets
/// (an error opening it is redacted like an adapter's).
#[derive(Debug, Clone)]
pub struct StoreChoice {
    pub store: Store,
    secrets: Secrets,
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

impl StoreChoice {
    /// The store of `manifest` (read from `manifest_path`); no I/O.
    pub fn of(manifest: &Manifest, manifest_path: &Path) -> Result<Self, Diagnostic> {
        let base = crate::commands::base_dir(manifest_path);
        let url = env(STATE_URL_ENV);
        if manifest.state.is_some() && url.is_some() {
            return Err(Diagnostic::new(
                "state_store_ambiguous",
                "state",
                format!("the manifest's `state:` block and {STATE_URL_ENV} both name a state store"),
            )
            .hint(format!("unset {STATE_URL_ENV} for this manifest, or remove its `state:` block")));
        }
        let wiring = Wiring { base_dir: &base, env: &env, failpoints: Default::default() };
        let store = match (&manifest.state, url) {
            (Some(StateSpec::Postgres { .. }), _) => {
                Store::Postgres(StateLocation::from_manifest(manifest, &wiring)?.expect("a postgres state block has a location"))
            }
            (None, Some(url)) => Store::Postgres(StateLocation::from_url(STATE_URL_ENV, &url, &base)?),
            (Some(StateSpec::Sqlite) | None, _) => Store::Sqlite(crate::commands::work_dir(manifest, manifest_path).join("state.db")),
        };
        Ok(StoreChoice { store, secrets: Secrets::of(manifest, &env) })
    }

    /// Where the store is, for messages (no credentials).
    pub fn describe(&self) -> String {
        match &self.store {
            Store::Sqlite(p) => p.display().to_string(),
            Store::Postgres(l) => l.describe(),
        }
    }

    /// Whether the store is shared by hosts (leases of other hosts' runs
    /// then expire rather than being taken over by liveness).
    pub fn is_shared(&self) -> bool {
        matches!(self.store, Store::Postgres(_))
    }

    /// Opens the store; with `create = false` a store that does not exist
    /// yet is None (a refused run, `status` and `plan` create nothing).
    pub fn open(&self, create: bool) -> Result<Option<Arc<dyn StateStore>>, AdapterError> {
        let unavailable = |e: dpone_core::state::StoreError, hint: &str| {
            AdapterError::permanent("state_store_unavailable", format!("cannot open the state store {}: {e}", self.describe())).hint(hint)
        };
        let store = self.open_raw(create, unavailable).map_err(|e| self.secrets.error(e))?;
        Ok(store.map(|inner| Arc::new(Redacted { inner, secrets: self.secrets.clone() }) as Arc<dyn StateStore>))
    }

    fn open_raw(
        &self,
        create: bool,
        unavailable: impl Fn(dpone_core::state::StoreError, &str) -> AdapterError,
    ) -> Result<Option<Arc<dyn StateStore>>, AdapterError> {
        match &self.store {
            Store::Sqlite(path) => {
                if !create && !path.exists() {
                    return Ok(None);
                }
                dpone_sqlite::SqliteStateStore::open(path)
                    .map(|s| Some(Arc::new(s) as Arc<dyn StateStore>))
                    .map_err(|e| unavailable(e, "check that runtime.storage.work_dir is a writable local folder"))
            }
            Store::Postgres(l) => l.open(create).map(|s| s.map(|s| Arc::new(s) as Arc<dyn StateStore>)).map_err(|e| {
                unavailable(e, "check state.connection (or DPONE_STATE_URL), that the server accepts connections and that the role may create the state tables")
            }),
        }
    }
}

/// An open state store whose errors leave with the manifest's credentials
/// redacted, as an adapter's do: a store's driver may echo its connection
/// (a DSN, a URL with its password) in any error, long after it opened.
struct Redacted {
    inner: Arc<dyn StateStore>,
    secrets: Secrets,
}

impl Redacted {
    fn scrub<T>(&self, r: Result<T, StoreError>) -> Result<T, StoreError> {
        r.map_err(|e| match e {
            StoreError::Io(m) => StoreError::Io(self.secrets.text(&m)),
            StoreError::Held { scope, holder, remaining_ms } => {
                StoreError::Held { scope: self.secrets.text(&scope), holder: self.secrets.text(&holder), remaining_ms }
            }
            StoreError::LeaseLost(scope) => StoreError::LeaseLost(self.secrets.text(&scope)),
            StoreError::Conflict { key, expected, found } => StoreError::Conflict { key: self.secrets.text(&key), expected, found },
        })
    }
}

impl StateStore for Redacted {
    fn acquire(&self, scope: &str, holder: &str, ttl_ms: u64) -> Result<Lease, StoreError> {
        self.scrub(self.inner.acquire(scope, holder, ttl_ms))
    }

    fn take_over(&self, scope: &str, stale_holder: &str, holder: &str, ttl_ms: u64) -> Result<Lease, StoreError> {
        self.scrub(self.inner.take_over(scope, stale_holder, holder, ttl_ms))
    }

    fn renew(&self, lease: &Lease, ttl_ms: u64) -> Result<(), StoreError> {
        self.scrub(self.inner.renew(lease, ttl_ms))
    }

    fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        self.scrub(self.inner.release(lease))
    }

    fn get(&self, key: &str) -> Result<Option<Versioned>, StoreError> {
        self.scrub(self.inner.get(key))
    }

    fn compare_and_set(&self, lease: &Lease, key: &str, expected: Option<u64>, body: &str) -> Result<u64, StoreError> {
        self.scrub(self.inner.compare_and_set(lease, key, expected, body))
    }

    fn keys(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        self.scrub(self.inner.keys(prefix))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "s3cr3t-pw";

    /// A store whose every call fails with an error echoing its DSN.
    struct Leaky;

    fn leak() -> StoreError {
        StoreError::Io(format!("connection to postgres://dpone:{SECRET}@db/state lost; password={SECRET}"))
    }

    impl StateStore for Leaky {
        fn acquire(&self, scope: &str, _: &str, _: u64) -> Result<Lease, StoreError> {
            Err(StoreError::Held { scope: scope.into(), holder: format!("pid 1 ({SECRET})"), remaining_ms: 1 })
        }
        fn take_over(&self, _: &str, _: &str, _: &str, _: u64) -> Result<Lease, StoreError> {
            Err(leak())
        }
        fn renew(&self, _: &Lease, _: u64) -> Result<(), StoreError> {
            Err(leak())
        }
        fn release(&self, _: &Lease) -> Result<(), StoreError> {
            Err(leak())
        }
        fn get(&self, _: &str) -> Result<Option<Versioned>, StoreError> {
            Err(leak())
        }
        fn compare_and_set(&self, _: &Lease, _: &str, _: Option<u64>, _: &str) -> Result<u64, StoreError> {
            Err(leak())
        }
        fn keys(&self, _: &str) -> Result<Vec<String>, StoreError> {
            Err(leak())
        }
    }

    #[test]
    fn errors_of_an_open_store_are_redacted() {
        let manifest = dpone_core::manifest::load(&format!(
            "kind: dpone.batch.v1\nsource:\n  type: postgres\n  connection: {{connection_type: env, connection_id: PG}}\n  table: {{name: t}}\nsink:\n  type: clickhouse\n  connection: {{connection_type: params, params: {{host: ch, user: dpone, password: {SECRET}}}}}\n  table: {{name: t}}\n  strategy: {{mode: full_refresh}}\n"
        ))
        .expect("a valid manifest");
        let store = Redacted { inner: Arc::new(Leaky), secrets: Secrets::of(&manifest, &|_| None) };
        let lease = Lease { scope: "s".into(), holder: "h".into(), fence: 1 };
        let errors = [
            store.acquire("s", "h", 1).unwrap_err(),
            store.take_over("s", "a", "h", 1).unwrap_err(),
            store.renew(&lease, 1).unwrap_err(),
            store.release(&lease).unwrap_err(),
            store.get("k").unwrap_err(),
            store.compare_and_set(&lease, "k", None, "b").unwrap_err(),
            store.keys("k").unwrap_err(),
        ];
        for e in errors {
            let text = e.to_string();
            assert!(!text.contains(SECRET), "the password leaked: {text}");
            assert!(text.contains(crate::redact::REDACTED), "{text}");
        }
    }
}

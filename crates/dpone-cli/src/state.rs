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
use dpone_core::state::StateStore;
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
        self.open_raw(create, unavailable).map_err(|e| self.secrets.error(e))
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

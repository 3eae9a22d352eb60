//! Where a process keeps its local files (the SQLite state store, evidence,
//! batch records): the work dir, and the check that it can be written
//! before anything else is.
//!
//! Precedence, first set wins:
//! 1. `--work-dir <DIR>` (a flag of every command; relative to the current
//!    directory);
//! 2. `DPONE_WORK_DIR` (relative to the current directory);
//! 3. the manifest's `runtime.storage.work_dir` (relative to the manifest);
//! 4. `.dpone` next to the manifest.
//!
//! The flag and the variable exist for manifests that sit where nothing
//! may be written, such as a Kubernetes ConfigMap mounted read-only: the
//! manifest stays as it is and the process writes elsewhere. Neither is
//! part of the run's identity (the manifest's fingerprint), like `state`.

use dpone_core::Diagnostic;
use dpone_core::manifest::Manifest;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The environment variable that sets the work dir of every process.
pub const WORK_DIR_ENV: &str = "DPONE_WORK_DIR";

/// `--work-dir`, set once by `main` before any command runs.
static FLAG: OnceLock<PathBuf> = OnceLock::new();

/// Records `--work-dir` for this invocation (the first call wins).
pub fn set_flag(dir: PathBuf) {
    let _ = FLAG.set(dir);
}

/// The work dir and what chose it (a flag, a variable or a manifest path,
/// for messages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkDir {
    pub path: PathBuf,
    /// `--work-dir`, `DPONE_WORK_DIR` or `runtime.storage.work_dir` (also
    /// for the default: that is the key that would change it).
    pub origin: &'static str,
}

/// The work dir of `manifest` (read from `manifest_path`); no I/O.
pub fn resolve(manifest: &Manifest, manifest_path: &Path) -> WorkDir {
    let env = std::env::var_os(WORK_DIR_ENV).filter(|v| !v.is_empty()).map(PathBuf::from);
    resolve_with(FLAG.get().cloned(), env, manifest.work_dir.as_deref(), manifest_path)
}

fn resolve_with(flag: Option<PathBuf>, env: Option<PathBuf>, manifest: Option<&str>, manifest_path: &Path) -> WorkDir {
    if let Some(path) = flag {
        return WorkDir { path, origin: "--work-dir" };
    }
    if let Some(path) = env {
        return WorkDir { path, origin: WORK_DIR_ENV };
    }
    let base = crate::commands::base_dir(manifest_path);
    let path = match manifest {
        Some(d) if Path::new(d).is_absolute() => PathBuf::from(d),
        Some(d) => base.join(d),
        None => base.join(".dpone"),
    };
    WorkDir { path, origin: "runtime.storage.work_dir" }
}

impl WorkDir {
    /// Refuses a work dir this process cannot write, before the run writes
    /// anything anywhere: the folder is created if missing, then a probe
    /// file is created, written, synced and removed, and so are the folders
    /// the check created (a refused run leaves no trace). A run that could
    /// not write its evidence would otherwise publish and then fail
    /// (`evidence_write_failed`), and every retry would do the same.
    pub fn check_writable(&self) -> Result<(), Diagnostic> {
        probe(&self.path).map_err(|e| {
            let fix = match self.origin {
                "--work-dir" => "pass a --work-dir this process can write".to_string(),
                WORK_DIR_ENV => format!("set {WORK_DIR_ENV} to a folder this process can write"),
                _ => format!(
                    "set {WORK_DIR_ENV} (or --work-dir) to a writable folder, e.g. an emptyDir volume when the manifest is mounted read-only, or change runtime.storage.work_dir"
                ),
            };
            Diagnostic::new(
                "work_dir_not_writable",
                self.origin,
                format!("the work dir {} cannot be written: {e}", self.path.display()),
            )
            .hint(format!("{fix}; nothing was written"))
        })
    }
}

fn probe(dir: &Path) -> std::io::Result<()> {
    use std::io::Write;
    // The folders that do not exist yet, deepest first: removed afterwards.
    let missing: Vec<&Path> = dir.ancestors().take_while(|a| !a.as_os_str().is_empty() && !a.exists()).collect();
    let result = std::fs::create_dir_all(dir).and_then(|()| {
        let file = dir.join(format!(".dpone-write-check-{}", std::process::id()));
        let written = std::fs::OpenOptions::new().write(true).create(true).truncate(true).open(&file).and_then(|mut f| {
            f.write_all(b"dpone")?;
            f.sync_all()
        });
        let removed = std::fs::remove_file(&file);
        written.and(removed)
    });
    for created in missing {
        let _ = std::fs::remove_dir(created);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_wins_over_the_variable_which_wins_over_the_manifest() {
        let m = Path::new("/etc/dpone/batch.yaml");
        let flag = Some(PathBuf::from("/f"));
        let env = Some(PathBuf::from("/e"));
        assert_eq!(resolve_with(flag.clone(), env.clone(), Some("w"), m), WorkDir { path: "/f".into(), origin: "--work-dir" });
        assert_eq!(resolve_with(None, env, Some("w"), m), WorkDir { path: "/e".into(), origin: WORK_DIR_ENV });
        assert_eq!(resolve_with(None, None, Some("w"), m).path, PathBuf::from("/etc/dpone/w"));
        assert_eq!(resolve_with(None, None, Some("/abs"), m).path, PathBuf::from("/abs"));
        assert_eq!(resolve_with(None, None, None, m).path, PathBuf::from("/etc/dpone/.dpone"));
        assert_eq!(resolve_with(None, None, None, Path::new("m.yaml")).path, PathBuf::from("./.dpone"));
    }

    #[test]
    fn a_work_dir_that_cannot_be_written_is_refused_with_what_to_set() {
        // A regular file where the folder should be blocks even root.
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("not-a-dir");
        std::fs::write(&file, "x").unwrap();
        for (origin, says) in [("--work-dir", "--work-dir"), (WORK_DIR_ENV, WORK_DIR_ENV), ("runtime.storage.work_dir", WORK_DIR_ENV)] {
            let d = WorkDir { path: file.join("work"), origin }.check_writable().unwrap_err();
            assert_eq!((d.code.as_str(), d.path.as_str()), ("work_dir_not_writable", origin));
            assert!(d.hint.as_deref().unwrap_or_default().contains(says), "{d:?}");
        }
        let ok = WorkDir { path: tmp.path().join("a/b"), origin: WORK_DIR_ENV };
        ok.check_writable().unwrap();
        assert!(!tmp.path().join("a").exists(), "the folders the check created are removed");
        std::fs::create_dir_all(&ok.path).unwrap();
        ok.check_writable().unwrap();
        assert_eq!(std::fs::read_dir(&ok.path).unwrap().count(), 0, "the probe leaves nothing");
    }
}

//! The repository, read through the system `git` binary.
//!
//! Only committed objects are read: revisions resolve to full commit ids,
//! the change list is `git diff-tree` between the two commits' trees (with
//! rename detection, so a rename is reported as one), and file contents are
//! the blobs of those commits. The working tree, the index and any local
//! modification are ignored.

use dpone_core::Diagnostic;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A git repository on disk.
#[derive(Debug, Clone)]
pub struct Repo {
    dir: PathBuf,
}

/// One entry of `git diff-tree --raw`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawChange {
    /// `A`, `D`, `M`, `R`, `C`, `T`, `U` or `X`.
    pub status: char,
    pub old_mode: String,
    pub new_mode: String,
    pub old_blob: String,
    pub new_blob: String,
    /// The path before a rename or copy.
    pub old_path: Option<String>,
    pub path: String,
}

/// A blob's size and, when it is within the reading limit, its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blob {
    pub size: u64,
    pub bytes: Option<Vec<u8>>,
}

fn git_unavailable(e: &std::io::Error) -> Diagnostic {
    Diagnostic::new("git_unavailable", "", format!("cannot run `git`: {e}")).hint("install git and make sure it is on PATH")
}

fn stderr_line(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).lines().find(|l| !l.trim().is_empty()).unwrap_or("").trim().to_string()
}

/// A full commit id: 40 (SHA-1) or 64 (SHA-256) lower-case hex digits.
pub fn is_full_sha(s: &str) -> bool {
    (s.len() == 40 || s.len() == 64) && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

impl Repo {
    /// Opens the repository containing `dir`.
    pub fn open(dir: &Path) -> Result<Repo, Diagnostic> {
        if !dir.is_dir() {
            return Err(Diagnostic::new("not_a_git_repository", "--repo", format!("{} is not a directory", dir.display()))
                .hint("pass the folder of a git checkout with --repo"));
        }
        let repo = Repo { dir: dir.to_path_buf() };
        let out = repo.git(&["rev-parse", "--git-dir"])?;
        if !out.status.success() {
            return Err(Diagnostic::new(
                "not_a_git_repository",
                "--repo",
                format!("{} is not inside a git repository: {}", dir.display(), stderr_line(&out)),
            )
            .hint("run in a git checkout or pass its folder with --repo"));
        }
        Ok(repo)
    }

    fn git(&self, args: &[&str]) -> Result<Output, Diagnostic> {
        Command::new("git")
            .arg("-C")
            .arg(&self.dir)
            .args(args)
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_OPTIONAL_LOCKS", "0")
            .env("LC_ALL", "C")
            .output()
            .map_err(|e| git_unavailable(&e))
    }

    /// Resolves `rev` to the full id of the commit it names. `flag` names the
    /// option the revision came from, for the diagnostic.
    pub fn resolve(&self, rev: &str, flag: &str) -> Result<String, Diagnostic> {
        let invalid = |why: String| {
            Diagnostic::new("invalid_revision", flag, why).hint(
                "pass a commit id, branch or tag that exists in the repository; \
                 in a shallow CI clone fetch it first (git fetch origin <rev>)",
            )
        };
        if rev.trim().is_empty() {
            return Err(invalid("the revision is empty".into()));
        }
        if rev.starts_with('-') {
            return Err(invalid(format!("`{rev}` is not a revision (it starts with `-`)")));
        }
        let out = self.git(&["rev-parse", "--verify", "--quiet", "--end-of-options", &format!("{rev}^{{commit}}")])?;
        let sha = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if !out.status.success() || !is_full_sha(&sha) {
            return Err(invalid(format!("`{rev}` does not name a commit in {}", self.dir.display())));
        }
        Ok(sha)
    }

    /// The files that differ between two commits (full ids), renames detected.
    pub fn changes(&self, base: &str, head: &str) -> Result<Vec<RawChange>, Diagnostic> {
        if base == head {
            return Ok(Vec::new());
        }
        let out = self.git(&["diff-tree", "-r", "-z", "-M", "--raw", "--no-abbrev", "--no-commit-id", base, head])?;
        if !out.status.success() {
            return Err(Diagnostic::new("git_failed", "", format!("git diff-tree failed: {}", stderr_line(&out)))
                .hint("check that both commits are present in the repository"));
        }
        parse_raw(&out.stdout).map_err(|e| Diagnostic::new("git_failed", "", format!("unexpected git diff-tree output: {e}")))
    }

    /// A blob's size, and its bytes when it is at most `limit` bytes.
    pub fn blob(&self, id: &str, limit: u64) -> Result<Blob, Diagnostic> {
        let failed = |out: &Output| Diagnostic::new("git_failed", "", format!("cannot read blob {id}: {}", stderr_line(out)));
        let out = self.git(&["cat-file", "-s", id])?;
        if !out.status.success() {
            return Err(failed(&out));
        }
        let size: u64 = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .map_err(|_| Diagnostic::new("git_failed", "", format!("git cat-file -s {id} printed no size")))?;
        if size > limit {
            return Ok(Blob { size, bytes: None });
        }
        let out = self.git(&["cat-file", "blob", id])?;
        if !out.status.success() {
            return Err(failed(&out));
        }
        Ok(Blob { size, bytes: Some(out.stdout) })
    }
}

impl Repo {
    /// The regular file at `path` (from the repository's root) in `commit`:
    /// its size and, when at most `limit` bytes, its bytes. None when the
    /// commit has no regular file there (nothing, a folder, a symlink or a
    /// submodule).
    pub fn file_at(&self, commit: &str, path: &str, limit: u64) -> Result<Option<Blob>, Diagnostic> {
        let out = self.git(&["ls-tree", "-z", "--full-tree", commit, "--", path])?;
        if !out.status.success() {
            return Err(Diagnostic::new("git_failed", "", format!("git ls-tree {commit} {path} failed: {}", stderr_line(&out))));
        }
        // `<mode> SP <type> SP <id> TAB <path> NUL`
        let listing = String::from_utf8_lossy(&out.stdout);
        let Some((meta, listed)) = listing.split('\0').next().and_then(|e| e.split_once('\t')) else { return Ok(None) };
        let fields: Vec<&str> = meta.split(' ').collect();
        match fields.as_slice() {
            [mode, "blob", id] if listed == path && matches!(*mode, "100644" | "100755") => self.blob(id, limit).map(Some),
            _ => Ok(None),
        }
    }
}

/// Parses `git diff-tree -r -z --raw` output:
/// `:<old mode> <new mode> <old id> <new id> <status>[score]\0<path>\0[<new path>\0]`.
pub fn parse_raw(bytes: &[u8]) -> Result<Vec<RawChange>, String> {
    let mut fields = bytes.split(|b| *b == 0).map(|f| String::from_utf8_lossy(f).into_owned());
    let mut out = Vec::new();
    while let Some(meta) = fields.next() {
        if meta.is_empty() {
            continue;
        }
        let meta = meta.strip_prefix(':').ok_or_else(|| format!("entry `{meta}` does not start with `:`"))?;
        let parts: Vec<&str> = meta.split(' ').collect();
        let [old_mode, new_mode, old_blob, new_blob, status] = parts[..] else {
            return Err(format!("entry `{meta}` does not have five fields"));
        };
        let letter = status.chars().next().ok_or("empty status")?;
        let path = fields.next().filter(|p| !p.is_empty()).ok_or("missing path")?;
        let (old_path, path) = if matches!(letter, 'R' | 'C') {
            let new_path = fields.next().filter(|p| !p.is_empty()).ok_or("missing new path of a rename")?;
            (Some(path), new_path)
        } else {
            (None, path)
        };
        out.push(RawChange {
            status: letter,
            old_mode: old_mode.into(),
            new_mode: new_mode.into(),
            old_blob: old_blob.into(),
            new_blob: new_blob.into(),
            old_path,
            path,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `file_at` on this checkout's own history: a regular file is read, a
    /// folder or a missing path is None, a commit git does not have is
    /// `git_failed`.
    #[test]
    fn file_at_reads_regular_files_and_refuses_an_unknown_commit() {
        let repo = Repo::open(Path::new(env!("CARGO_MANIFEST_DIR"))).expect("the tests run in a git checkout");
        let head = repo.resolve("HEAD", "--head").unwrap();
        let file = repo.file_at(&head, "crates/dpone-ci/Cargo.toml", 1 << 20).unwrap().expect("a regular file");
        assert!(String::from_utf8(file.bytes.unwrap()).unwrap().contains("dpone-ci"));
        assert!(repo.file_at(&head, "crates/dpone-ci", 1 << 20).unwrap().is_none(), "a folder is no file");
        assert!(repo.file_at(&head, "crates/no-such-file.yaml", 1 << 20).unwrap().is_none());
        let e = repo.file_at(&"1".repeat(40), "crates/dpone-ci/Cargo.toml", 1 << 20).unwrap_err();
        assert_eq!(e.code, "git_failed", "{e}");
    }

    #[test]
    fn raw_output_with_renames_additions_and_mode_changes() {
        let z = "0000000000000000000000000000000000000000";
        let a = "a8926a52d8dcba5c4386945476ab6a2ad008afd4";
        let b = "9dfc208dffa85f841e9202337485b96367a625ee";
        let raw = format!(
            ":000000 100644 {z} {a} A\0new file\0:100644 100644 {a} {b} M\0x.yaml\0:100644 100644 {a} {a} R100\0y\0y2\0:100644 100755 {a} {a} M\0z\0"
        );
        let c = parse_raw(raw.as_bytes()).unwrap();
        assert_eq!(c.len(), 4);
        assert_eq!((c[0].status, c[0].path.as_str(), c[0].old_mode.as_str()), ('A', "new file", "000000"));
        assert_eq!((c[1].status, c[1].new_blob.as_str()), ('M', b));
        assert_eq!((c[2].status, c[2].old_path.as_deref(), c[2].path.as_str()), ('R', Some("y"), "y2"));
        assert_eq!((c[3].old_mode.as_str(), c[3].new_mode.as_str()), ("100644", "100755"));
        assert!(parse_raw(b"").unwrap().is_empty());
        assert!(parse_raw(b"garbage\0x\0").is_err());
        assert!(parse_raw(format!(":100644 100644 {a} {a} R100\0only-old\0").as_bytes()).is_err());
    }

    #[test]
    fn full_shas() {
        assert!(is_full_sha("c6edb93d583f4f3cc7ece2db90ad2d37e499a242"));
        assert!(is_full_sha(&"a".repeat(64)));
        assert!(!is_full_sha("c6edb93"));
        assert!(!is_full_sha("C6EDB93D583F4F3CC7ECE2DB90AD2D37E499A242"));
    }
}

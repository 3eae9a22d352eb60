//! The process dpone runs in, as the engine sees it ([`RunHost`]): the
//! evidence file, the peak RSS, whether a lease holder still exists, and
//! who this process is. The only place the run touches the file system
//! and process state outside the adapters and the state store.

use dpone_engine::RunHost;
use std::path::Path;

#[derive(Debug)]
pub struct ProcessHost {
    /// Whether a holder of this host whose process is gone may be taken
    /// over at once (false for a state store shared by hosts: see
    /// `commands::run_options`).
    pub local_liveness: bool,
}

impl RunHost for ProcessHost {
    /// The standard library's per-process random hash keys (seeded by the
    /// OS) mixed with the time and the process id.
    fn entropy(&self) -> u64 {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0));
        h.finish()
    }

    fn write_evidence(&self, path: &Path, body: &[u8]) -> std::io::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        // Written aside, then renamed: a reader sees the old file or the new one.
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, body)?;
        std::fs::rename(&tmp, path)
    }

    /// Linux `VmHWM`.
    fn peak_rss_bytes(&self) -> Option<u64> {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    }

    /// Holders read `dpone <version> pid <pid> on <host>` (see [`holder`]).
    /// A holder on this host whose process is gone cannot renew its lease
    /// any more. A reused pid only makes dpone wait for expiry, never take
    /// over a live run.
    fn holder_is_dead(&self, stale: &str) -> bool {
        if !self.local_liveness {
            return false;
        }
        let me = holder();
        let host_of = |h: &str| h.rsplit_once(" on ").map(|(_, host)| host.to_string());
        let pid_of = |h: &str| h.split(" pid ").nth(1).and_then(|r| r.split(' ').next()).and_then(|p| p.parse::<u32>().ok());
        match (host_of(stale), host_of(&me), pid_of(stale)) {
            (Some(a), Some(b), Some(pid)) if a == b => pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists(),
            _ => false,
        }
    }
}

/// Who is running, for leases and journals: program, process and host.
pub fn holder() -> String {
    let host = std::fs::read_to_string("/etc/hostname").map(|h| h.trim().to_string()).unwrap_or_else(|_| "localhost".into());
    format!("dpone {} pid {} on {host}", env!("CARGO_PKG_VERSION"), std::process::id())
}

/// The holder of one process of a run: `dpone <version> pid <pid>
/// [<process>] on <host>`, so that two processes of one invocation never
/// hold one lease as the same holder (liveness still reads pid and host).
pub fn holder_for(process: &str) -> String {
    let label: String = process.chars().map(|c| if c.is_whitespace() || c.is_control() { '_' } else { c }).collect();
    let me = holder();
    match me.rsplit_once(" on ") {
        Some((who, host)) => format!("{who} [{label}] on {host}"),
        None => me,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A holder of this host whose process is gone is taken over at once
    /// only with a local store; with a shared one, only expiry frees it.
    #[test]
    fn only_a_local_store_takes_over_a_gone_holder_of_this_host() {
        let me = holder();
        let (_, host) = me.rsplit_once(" on ").unwrap();
        // A pid beyond Linux's pid_max, which no process has.
        let gone = format!("dpone 0.1.0 pid 4294967 on {host}");
        assert!(ProcessHost { local_liveness: true }.holder_is_dead(&gone));
        assert!(!ProcessHost { local_liveness: false }.holder_is_dead(&gone));
        assert!(!ProcessHost { local_liveness: true }.holder_is_dead(&me), "this process is alive");
        assert!(!ProcessHost { local_liveness: true }.holder_is_dead("dpone 0.1.0 pid 1 on another-host"));
    }
}

//! A private ClickHouse server (to stop it in the middle of a test).

use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn required_env(var: &str) -> String {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => v,
        _ => panic!(
            "{var} is not set: this test starts a private ClickHouse server from the cached chdb virtualenv. \
             Run the tests with `scripts/test.sh`, or (re)start the servers with `scripts/services.sh start` \
             and `eval \"$(scripts/services.sh env)\"`, which export it."
        ),
    }
}

/// `GET /ping` over plain HTTP/1.0; the body, or None if nothing answers.
pub fn ping(port: u16) -> Option<String> {
    let mut s = std::net::TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(b"GET /ping HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut response = String::new();
    s.read_to_string(&mut response).ok()?;
    response.split_once("\r\n\r\n").map(|(_, body)| body.trim().to_string())
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port").local_addr().expect("a local address").port()
}

/// A ClickHouse 26.x server of this test alone (chdb-core, like
/// `scripts/services.sh` starts the shared one), with its data in a temp dir.
/// Dropping it kills the process.
pub struct PrivateClickhouse {
    child: Option<Child>,
    pub port: u16,
    pub url: String,
    dir: tempfile::TempDir,
}

impl PrivateClickhouse {
    pub fn start() -> PrivateClickhouse {
        let python = required_env("DPONE_TEST_CHDB_PYTHON");
        let launcher = required_env("DPONE_TEST_CHDB_LAUNCHER");
        let mut last_log = String::new();
        // A port picked by the OS may be taken before the server binds it: retry with a fresh one.
        for _attempt in 0..3 {
            let dir = tempfile::tempdir().expect("a temp dir");
            let port = free_port();
            let log = std::fs::File::create(dir.path().join("server.log")).expect("a log file");
            let child = Command::new(&python)
                .arg("-u")
                .arg(&launcher)
                .args(["--port", &port.to_string()])
                .arg("--data-dir")
                .arg(dir.path().join("data"))
                .arg("--run-dir")
                .arg(dir.path().join("run"))
                .stdin(Stdio::null())
                .stdout(log.try_clone().expect("a log handle"))
                .stderr(log)
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start {python} {launcher}: {e}"));
            let mut server = PrivateClickhouse { child: Some(child), port, url: format!("http://127.0.0.1:{port}"), dir };
            let deadline = Instant::now() + Duration::from_secs(90);
            loop {
                if ping(port).as_deref() == Some("Ok.") {
                    return server;
                }
                if !server.is_running() || Instant::now() > deadline {
                    break;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            last_log = std::fs::read_to_string(server.dir.path().join("server.log")).unwrap_or_default();
            server.kill();
        }
        panic!("the private ClickHouse server did not answer /ping; its log:\n{last_log}");
    }

    fn is_running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Kills the server (SIGKILL to its pid) and waits until it is gone.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for PrivateClickhouse {
    /// A failing test must not leave its server running.
    fn drop(&mut self) {
        self.kill();
    }
}

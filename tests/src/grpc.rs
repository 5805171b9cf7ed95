//! The gRPC tests' real components: grpcio servers with the standard health service, and
//! grpcio's own client as the oracle (tests/py/grpc_fixture.py, run by the virtual environment
//! `cargo xtask setup` makes under target/grpc-venv).
use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use crate::{netns::Netns, procs::Proc};

fn python() -> PathBuf {
    let python = crate::target_dir().join("grpc-venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run `cargo xtask setup` (it makes the gRPC test environment)",
        python.display()
    );
    python
}

fn script() -> &'static str {
    concat!(env!("CARGO_MANIFEST_DIR"), "/py/grpc_fixture.py")
}

/// The servers of `grpc_fixture.py serve` in `ns`, on `port` to `port + 4` of `addr`; `dir`
/// holds the TLS pair (server.crt, server.key), the CA of client certificates (ca.pem) and
/// the `flip` file.
pub struct GrpcServers {
    _proc: Proc,
    dir: PathBuf,
}

impl GrpcServers {
    pub fn start(ns: &Netns, dir: &Path, addr: &str, port: u16) -> Self {
        let _ = std::fs::remove_file(dir.join("ready"));
        let python = python();
        let port = port.to_string();
        let argv = [
            python.to_str().unwrap(),
            script(),
            "serve",
            dir.to_str().unwrap(),
            addr,
            &port,
        ];
        let proc = Proc::spawn(ns, None, &argv, &dir.join("grpc.log"), "grpc servers");
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !dir.join("ready").exists() {
            let log = std::fs::read_to_string(dir.join("grpc.log")).unwrap_or_default();
            assert!(
                std::time::Instant::now() < deadline,
                "the gRPC servers did not start:\n{log}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Self {
            _proc: proc,
            dir: dir.to_path_buf(),
        }
    }

    /// What the health service says of "shop.Flip" from now on (read within 100 ms).
    pub fn flip(&self, serving: bool) {
        let word = if serving { "SERVING" } else { "NOT_SERVING" };
        std::fs::write(self.dir.join("flip"), word).unwrap();
    }
}

/// grpcio's verdict on `target`'s health of `service`, asked from `ns`: the health status
/// (SERVING, NOT_SERVING, ...) or the gRPC status code's name (UNIMPLEMENTED, NOT_FOUND,
/// DEADLINE_EXCEEDED, ...). With `tls`, over TLS verified against (CA file, server name), and
/// with `client`, presenting that certificate and key.
pub fn oracle(
    ns: &Netns,
    target: &str,
    service: &str,
    timeout: Duration,
    tls: Option<(&Path, &str)>,
    client: Option<(&Path, &Path)>,
) -> String {
    let python = python();
    let timeout = format!("{:.3}", timeout.as_secs_f64());
    let mut args = vec![
        "netns".to_string(),
        "exec".into(),
        ns.name.clone(),
        python.display().to_string(),
        script().into(),
        "check".into(),
        target.into(),
        service.into(),
        timeout,
    ];
    if let Some((ca, name)) = tls {
        args.extend([ca.display().to_string(), name.to_string()]);
        if let Some((cert, key)) = client {
            args.extend([cert.display().to_string(), key.display().to_string()]);
        }
    }
    let out = std::process::Command::new("ip")
        .args(&args)
        .output()
        .expect("run the gRPC oracle");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

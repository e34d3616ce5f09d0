//! The built binary, run from the repository root (CLI and process tests).

use std::io::Write;
use std::net::SocketAddr;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The built binary, run from the repository root.
pub fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_knative-ha-webhook"));
    c.current_dir(env!("CARGO_MANIFEST_DIR"));
    c
}

pub fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("binary runs")
}

pub fn run_stdin(args: &[&str], input: &str) -> Output {
    let mut child = bin()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("binary runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}
pub fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

/// A `serve` process of the built binary whose stderr (the log) is read
/// line by line on a thread; killed on drop if a test failed half-way.
pub struct Proc {
    pub child: std::process::Child,
    pub lines: std::sync::mpsc::Receiver<String>,
    /// Every line read so far by [`Proc::wait_line`], [`Proc::addresses`]
    /// and [`Proc::rest`].
    pub seen: Vec<String>,
}

impl Drop for Proc {
    fn drop(&mut self) {
        // Only if a test failed half-way: never leave the server running.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the binary with `args` (`RUST_LOG` unset, stdout discarded).
pub fn spawn_logged(args: &[&str]) -> Proc {
    use std::io::{BufRead, BufReader};
    let mut child = Command::new(env!("CARGO_BIN_EXE_knative-ha-webhook"))
        .args(args)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("binary runs");
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // Split on bytes: a log line that is not UTF-8 is still a line.
        for line in BufReader::new(stderr).split(b'\n').map_while(Result::ok) {
            if tx
                .send(String::from_utf8_lossy(&line).into_owned())
                .is_err()
            {
                break;
            }
        }
    });
    Proc {
        child,
        lines: rx,
        seen: Vec::new(),
    }
}

/// `serve` on `examples/policy.yaml` with a self-signed certificate whose
/// CA goes to `dir/ca.pem`, on loopback ports chosen by the kernel, with
/// this shutdown delay and log format.
pub fn spawn_serve(dir: &std::path::Path, delay: &str, format: &str) -> Proc {
    let policy = super::example_policy_path();
    let ca = dir.join("ca.pem");
    spawn_logged(&[
        "serve",
        "--policy-file",
        policy.to_str().unwrap(),
        "--self-signed",
        ca.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "127.0.0.1:0",
        "--shutdown-delay",
        delay,
        "--log-format",
        format,
    ])
}

impl Proc {
    /// Waits (at most 60 s) for a log line containing `needle`; returns it.
    pub fn wait_line(&mut self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Ok(line) = self.lines.recv_timeout(Duration::from_millis(200)) {
                self.seen.push(line.clone());
                if line.contains(needle) {
                    return line;
                }
            }
        }
        panic!(
            "no log line with {needle:?}; got:\n{}",
            self.seen.join("\n")
        );
    }

    /// Waits (at most 60 s) for the JSON log line announcing the bound
    /// addresses: (listen, metrics listen).
    pub fn addresses(&mut self) -> (SocketAddr, SocketAddr) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            let Ok(line) = self.lines.recv_timeout(Duration::from_millis(200)) else {
                continue;
            };
            self.seen.push(line.clone());
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
                continue;
            };
            if v["message"] == "serving POST /mutate over HTTPS" {
                return (
                    v["listen"].as_str().unwrap().parse().unwrap(),
                    v["metrics_listen"].as_str().unwrap().parse().unwrap(),
                );
            }
        }
        panic!("server did not announce its addresses");
    }

    /// Sends `sig` (`-INT`, `-TERM`) with kill(1).
    pub fn signal(&self, sig: &str) {
        let pid = self.child.id().to_string();
        assert!(
            Command::new("kill")
                .args([sig, &pid])
                .status()
                .unwrap()
                .success()
        );
    }

    /// Waits for the process to exit; fails after `limit`.
    pub fn wait_exit(&mut self, limit: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "process did not exit in time");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Every remaining log line (after exit).
    pub fn rest(&mut self) -> Vec<String> {
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(2)) {
            self.seen.push(line);
        }
        self.seen.clone()
    }
}

/// What a command of the binary that talks to a cluster printed.
pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// The binary's `command ARGS...` (`audit`, `restore`) with `KUBECONFIG` set
/// to `kubeconfig`, or unset; HOME empty and no in-cluster environment, so
/// nothing but the given kubeconfig can be found.
pub async fn cluster_command(
    command: &str,
    kubeconfig: Option<&std::path::Path>,
    args: &[&str],
) -> Out {
    let home = tempfile::tempdir().unwrap();
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_knative-ha-webhook"));
    match kubeconfig {
        Some(k) => cmd.env("KUBECONFIG", k),
        None => cmd.env_remove("KUBECONFIG"),
    };
    let out = cmd
        .arg(command)
        .args(args)
        .env("HOME", home.path())
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .output()
        .await
        .expect("run the binary");
    Out {
        code: out.status.code().expect("exit code"),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

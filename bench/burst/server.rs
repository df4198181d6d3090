//! A `delayq serve` process beside the benchmark, and an HTTP client for it.

use super::*;

/// A `delayq serve` process, killed on drop.
pub(crate) struct Serve {
    pub(crate) base: String,
    child: Child,
}

impl Serve {
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `delayq` binary beside this benchmark's (target/PROFILE/delayq).
fn delayq_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let bin = exe
        .parent()
        .and_then(|examples| examples.parent())
        .map(|profile| profile.join("delayq"))
        .unwrap();
    assert!(
        bin.exists(),
        "{} is missing: build it with the benchmark (cargo build --release --example bench --bin delayq)",
        bin.display()
    );
    bin
}

/// `delayq serve` on `redis` with `extra` flags; returns once it dispatches
/// (so the pushing queue started after it leaves dispatching to it).
pub(crate) async fn serve(redis: &Redis, extra: &[&str], http: &reqwest::Client) -> Serve {
    let mut child = Command::new(delayq_binary())
        .args(["serve", "--listen", "127.0.0.1:0", "--redis", &redis.url()])
        .args(extra)
        .env("DELAYQ_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("delayq listening on ")
        .unwrap_or_else(|| panic!("delayq serve said {line:?}"))
        .to_owned();
    let s = Serve {
        base: format!("http://{addr}"),
        child,
    };
    let start = Instant::now();
    loop {
        let r: Value = http
            .get(format!("{}/v1/instances", s.base))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let dispatching = r["instances"].as_array().is_some_and(|v| {
            v.iter()
                .any(|i| i["dispatching"].as_array().is_some_and(|d| !d.is_empty()))
        });
        if dispatching {
            return s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "delayq serve not up"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub(crate) fn http_client() -> reqwest::Client {
    delayq::https::client_builder().build().unwrap()
}

//! HTTP push through wrk, a separate C process, against an in-process
//! delayq server: the compatible `/push` and the native `/v1/jobs`.

use std::path::Path;
use std::process::Command;

use delayq::http::{AppState, ServerConfig};
use delayq::Shutdown;

use crate::common::{cpu, queue, BENCH_DIR};
use crate::options::{Sizes, System};
use crate::table::{record, Table};
use crate::Redis;

/// delayq's rows (BullMQ has no HTTP server); skipped without wrk.
pub(crate) async fn run(s: &Sizes, t: &mut Table) {
    for (row, script) in [
        ("HTTP /push (compatible), 64 conns, wrk (jobs/s)", "compat"),
        ("HTTP /v1/jobs (native), 64 conns, wrk (jobs/s)", "native"),
    ] {
        if let Some((v, us)) = http_push(s.wrk_secs, script).await {
            record(t, row, System::Delayq, v);
            record(
                t,
                &format!("{row}, Redis CPU per push (us)"),
                System::Delayq,
                us,
            );
        }
    }
}

/// HTTP push through wrk (`bench/push.lua`, `mode` compat or native):
/// jobs/s and Redis CPU per push (us), or None without wrk.
async fn http_push(secs: u32, mode: &str) -> Option<(f64, f64)> {
    if Command::new("wrk").arg("--version").output().is_err() {
        return None;
    }
    let redis = Redis::start_tcp(&[]);
    let q = queue(&redis);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = Shutdown::new();
    let server = tokio::spawn(delayq::http::serve(
        listener,
        AppState {
            queue: q.clone(),
            server: ServerConfig::default(),
        },
        shutdown.clone(),
    ));
    let script = Path::new(BENCH_DIR).join("push.lua");
    let mode = mode.to_owned();
    let cpu_before = cpu(&redis);
    let out = tokio::task::spawn_blocking(move || {
        Command::new("wrk")
            .args(["-t1", "-c64", "-d", &format!("{secs}s"), "-s"])
            .arg(script)
            .arg(format!("http://{addr}"))
            .args(["--", &mode])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let cpu_used = cpu(&redis) - cpu_before;
    shutdown.trigger();
    let _ = server.await;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let errors: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("non-success replies: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(u64::MAX);
    assert_eq!(errors, 0, "HTTP push had failures: {text}");
    let rate: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse().ok())?;
    Some((rate, cpu_used * 1e6 / (rate * secs as f64)))
}

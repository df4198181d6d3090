//! Recurring schedules and rate limits, across delayq instances that are
//! killed and restarted for real.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;
use delayq::{Config, Queue, RateLimit};
use serde_json::{json, Value};

mod definitions;
mod pausing;
mod rate_limits;
mod ticks;

/// The tick time (Unix ms) in a recurring job's id.
fn tick_of(id: &str) -> i64 {
    let at = id.rsplit('/').next().unwrap();
    chrono::DateTime::parse_from_rfc3339(at)
        .unwrap()
        .timestamp_millis()
}

async fn put(base: &str, name: &str, body: Value) -> Value {
    let r = reqwest::Client::new()
        .put(format!("{base}/v1/recurring/{name}"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

/// What a consumer saw: (id, handed over at Redis ms).
type Seen = Arc<Mutex<Vec<(String, i64)>>>;

/// A consumer that takes every job of `topic`, noting (id, handed over at
/// Redis ms), until stopped.
fn consume(q: Queue, topic: &str, stop: Arc<AtomicBool>) -> (tokio::task::JoinHandle<()>, Seen) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let topic = vec![topic.to_string()];
    let log = seen.clone();
    let task = tokio::spawn(async move {
        while !stop.load(Ordering::Relaxed) {
            if let Ok(Some(d)) = q.pop(&topic, Duration::from_millis(200)).await {
                log.lock()
                    .unwrap()
                    .push((d.id.clone(), d.popped_at_us / 1000));
                q.finish(&d.id, &d.token).await.unwrap();
            }
        }
    });
    (task, seen)
}

fn consumer_queue(redis: &RedisServer) -> Queue {
    Queue::connect(Config {
        dispatch: false,
        ..config(redis)
    })
    .unwrap()
}

fn cli(base: &str, args: &[&str]) -> (bool, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_delayq"))
        .args(args)
        .args(["--server", base])
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

//! Rate limits seen from outside: hand-over times checked against a
//! limit, and pops taken while something is done again and again.

use std::time::{Duration, Instant};

use delayq::Queue;

/// Asserts that hand-over times (Redis ms, any order) never run ahead of
/// `burst` plus `per_second` times the time gone since `start`.
pub fn assert_within_limit(times: &[i64], start: i64, per_second: f64, burst: f64) {
    let mut t = times.to_vec();
    t.sort();
    for (k, at) in t.iter().enumerate() {
        let allowed = burst + per_second * (at - start) as f64 / 1000.0;
        assert!(
            (k + 1) as f64 <= allowed + 0.001,
            "job {} handed over {} ms in: over the limit ({} in all)",
            k + 1,
            at - start,
            t.len()
        );
    }
}

/// Pops `topic` greedily for `span` and calls `again` every `every` (a
/// limit set again, say): the hand-over times (Redis ms).
pub async fn pops_while<F, Fut>(
    q: &Queue,
    topic: &str,
    span: Duration,
    every: Duration,
    mut again: F,
) -> Vec<i64>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let topics = vec![topic.to_string()];
    let begun = Instant::now();
    let mut next = begun;
    let mut times = Vec::new();
    while begun.elapsed() < span {
        if Instant::now() >= next {
            again().await;
            next += every;
        }
        let wait = next.saturating_duration_since(Instant::now());
        for d in q.pop_many(&topics, 10, wait).await.unwrap() {
            times.push(d.popped_at_us / 1000);
        }
    }
    times
}

//! Groups' gauges: per topic, how many groups it has, how many may hand
//! out a job now and how many wait for a token of their rate limit. Three
//! series a topic (topics bounded as every topic series is), never one a
//! group: a topic may have a million groups.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Arc;

use super::series::Meta;
use super::topics::Topics;
use crate::figures::GroupGauges;

pub(super) fn render(
    topics: &Arc<Topics>,
    groups: &BTreeMap<String, GroupGauges>,
    out: &mut String,
) {
    let meta = Meta::new(
        topics,
        "delayq_topic_groups",
        "A topic's groups, read from Redis at scrape time: known (with ready or reserved jobs, or settings), in_turn (may hand out a job now), waiting_token (out of tokens of their rate limit).",
        ["topic", "state"],
    );
    meta.header(out, "gauge");
    let mut by_label: BTreeMap<String, GroupGauges> = BTreeMap::new();
    for (topic, g) in groups {
        let s = by_label.entry(topics.peek(topic)).or_default();
        s.known += g.known;
        s.in_turn += g.in_turn;
        s.waiting_token += g.waiting_token;
    }
    for (topic, g) in by_label {
        for (state, n) in [
            ("known", g.known),
            ("in_turn", g.in_turn),
            ("waiting_token", g.waiting_token),
        ] {
            let l = meta.labels(&[topic.clone(), state.to_owned()], None);
            let _ = writeln!(out, "delayq_topic_groups{l} {n}");
        }
    }
}

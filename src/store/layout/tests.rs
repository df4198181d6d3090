//! layout.rs's own checks.

use super::*;

#[test]
fn all_but_body_names_every_job_field_but_the_body() {
    let src = include_str!("../layout.rs");
    let block = &src[src.find("pub mod field {").unwrap()..];
    let block = &block[..block.find("    pub const ALL_BUT_BODY").unwrap()];
    let mut values: Vec<&str> = block
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub const "))
        .filter_map(|l| l.split('"').nth(1))
        .collect();
    // A result (up to 64 KiB) and a parent's children (up to 1 MiB) are
    // read by a job's own read only.
    values.retain(|v| *v != field::BODY && *v != field::RESULT && *v != field::CHILDREN);
    let mut listed = field::ALL_BUT_BODY.to_vec();
    values.sort_unstable();
    listed.sort_unstable();
    assert_eq!(values, listed);
}

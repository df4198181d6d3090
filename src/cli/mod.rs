//! The `delayq` command line: `serve` and its helpers.

pub mod private_redis;
pub mod serve;

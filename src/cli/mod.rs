//! The `delayq` command line: `serve`, and client subcommands that talk to a
//! running server.

pub mod client;
pub mod config;
pub mod doctor;
pub mod import_ouqiang;
pub mod layout;
pub mod private_redis;
pub mod redis_checks;
pub mod redis_tls;
pub mod serve;
pub mod signals;

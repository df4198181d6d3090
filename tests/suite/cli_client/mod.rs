//! The client side of the command line against a running server: the
//! subcommands and `delayq work`.

use std::process::Command;

use crate::common::*;
use delayq::{JobState, RetryPolicy};
use serde_json::Value;

mod batches;
mod commands;
mod flows;
mod work;

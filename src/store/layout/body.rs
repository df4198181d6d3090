//! Storage layouts and a body's pieces: which layout this build reads, the
//! size of a piece, and the Lua table `BODIES` that lib/body.lua fills.

use super::{field, kind};

/// The highest layout this build reads (it reads every one up to it).
/// Layout 1: a body in one field, [`super::field::BODY`]. Layout 2: a body of
/// more than [`PIECE_BYTES`] and at most [`PIECED_MAX_BYTES`] in pieces.
/// Layout 3: besides, a delayed job in its topic schedule only (the shared
/// schedule keeps leases' ends).
/// `{p}:layout` says which one writers write; the upkeep raises it once
/// every live instance reads the next (see `loops::upkeep`).
pub const LAYOUT_READ: u8 = 3;

/// The longest piece of a pieced body: Redis's default
/// `hash-max-listpack-value`, so the job's hash stays a listpack.
pub const PIECE_BYTES: usize = 64;

/// The longest body kept in pieces: 16 pieces, well within Redis's
/// default `hash-max-listpack-entries` (128 fields) beside a job's other
/// fields. Past about 1 KiB pieces save nothing on average (each costs
/// about 5 B, and the one allocation of a listpack is rounded up to size
/// classes 256 B apart) while a pop reads them one field at a time; a
/// longer body stays whole (its hash a hashtable).
pub const PIECED_MAX_BYTES: usize = 1024;

/// The table lib/body.lua's helpers live in: one local for all of them,
/// as for every concern (lib/call.lua says why).
pub(super) fn lua_table() -> String {
    format!(
        "local BODIES = {{ piece = {PIECE_BYTES}, max = {PIECED_MAX_BYTES}, size = '{}', key = '{}' }}\n",
        field::BODY_SIZE,
        kind::LAYOUT
    )
}

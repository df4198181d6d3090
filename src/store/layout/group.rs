//! Groups' names in Redis: the fields of a group's hash, and the Lua table
//! `G` the scripts reach them by.

use super::kind;

/// Fields of a group's hash (`{p}:grp:<topic>\n<group>`).
pub mod group_field {
    /// The concurrency limit; absent: none.
    pub const LIMIT: &str = "c";
    /// Present (1) while the group is paused.
    pub const PAUSED: &str = "p";
    /// Reservations in use (slots); absent: 0.
    pub const USED: &str = "r";
    /// The counter that orders the group's line.
    pub const SEQ: &str = "s";
    /// Present while the group is in its topic's rotation (or waits in
    /// it for a token).
    pub const TURN: &str = "t";
    /// The group's rate limit: jobs a second, burst, tokens left
    /// (thousandths), when last taken (ms).
    pub const RATE_PER_S: &str = "rr";
    pub const RATE_BURST: &str = "rb";
    pub const RATE_TOKENS: &str = "rt";
    pub const RATE_AT: &str = "ra";
}

/// Groups' names, as fields of one Lua table `G` (which lib/groups.lua
/// fills with its helpers too): the library is near Lua's limit of 200
/// locals in one function.
pub(super) const LUA_NAMES: &[(&str, &str)] = &[
    ("READY_KEY", kind::GROUP_READY),
    ("HASH_KEY", kind::GROUP),
    ("TURNS_KEY", kind::GROUP_TURNS),
    ("INDEX_KEY", kind::GROUPS),
    ("LIMIT", group_field::LIMIT),
    ("PAUSED", group_field::PAUSED),
    ("USED", group_field::USED),
    ("SEQ", group_field::SEQ),
    ("TURN", group_field::TURN),
    ("RATE_PER_S", group_field::RATE_PER_S),
    ("RATE_BURST", group_field::RATE_BURST),
    ("RATE_TOKENS", group_field::RATE_TOKENS),
    ("RATE_AT", group_field::RATE_AT),
    ("WAIT_KEY", kind::GROUP_WAIT),
    // The heartbeats a grouped push reads while no leader set the layout.
    ("INSTANCE_KEY", kind::INSTANCE),
    ("INSTANCES_KEY", kind::INSTANCES),
];

/// The first layout whose builds know groups: a flag or heartbeat below it
/// means an instance that does not may run.
pub const GROUPS_LAYOUT: u8 = 2;

/// `local G = { ... }` for the prelude.
pub(super) fn lua_table() -> String {
    let mut out = String::from("local G = { ");
    for (name, value) in LUA_NAMES {
        out.push_str(&format!("{name} = '{value}', "));
    }
    out.push_str(&format!(
        "MAX_BYTES = {}, LAYOUT = {} }}\n",
        crate::job::MAX_GROUP_BYTES,
        GROUPS_LAYOUT
    ));
    out
}

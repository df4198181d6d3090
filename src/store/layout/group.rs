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
    /// Present while the group is in its topic's rotation.
    pub const TURN: &str = "t";
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
];

/// `local G = { ... }` for the prelude.
pub(super) fn lua_table() -> String {
    let mut out = String::from("local G = { ");
    for (name, value) in LUA_NAMES {
        out.push_str(&format!("{name} = '{value}', "));
    }
    out.push_str(&format!("MAX_BYTES = {} }}\n", crate::job::MAX_GROUP_BYTES));
    out
}

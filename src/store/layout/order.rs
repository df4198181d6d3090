//! Push order among ties: the names lib/order.lua's H.tie_seq writes
//! through the Lua table `H`, not as locals of their own (each concern's
//! names and helpers are one table: lib/call.lua says why).

use super::{field, kind};

pub(super) const LUA_NAMES: &[(&str, &str)] = &[("SEQ", field::SEQ), ("SEQ_KEY", kind::SEQ)];

/// `local H = { ... }` for the prelude (lib/order.lua, lib/schedule.lua
/// fill it with their helpers too).
pub(super) fn lua_table() -> String {
    let mut out = String::from("local H = { ");
    for (name, value) in LUA_NAMES {
        out.push_str(&format!("{name} = '{value}', "));
    }
    out.push_str("}\n");
    out
}

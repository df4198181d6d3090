//! What the test suite reaches inside the store; not part of the API.

pub use super::layout::{partition_of, slot, Keys};
pub use super::library::{call, eval_script_of, eval_shas, fcall};
pub use super::{relayout, ScriptDef, Status};
pub use crate::redis::library::Path;

/// The definitions of the scripts the suite calls by hand.
pub mod scripts {
    use crate::store::{batch::PerJob, script::Script, ScriptDef};
    use crate::store::{dispatch, pop, push, remove};

    pub const PUSH: &ScriptDef = push::Pushes::DEF;
    pub const REMOVE: &ScriptDef = remove::Removes::DEF;
    pub const POP: &ScriptDef = pop::Pop::DEF;
    pub const DISPATCH: &ScriptDef = dispatch::Dispatch::DEF;
}

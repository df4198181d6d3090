//! One script as one type: [`Script`] gives its name, flags and source
//! ([`ScriptDef`]), its arguments from a typed input and its reply decoded
//! into a typed output; [`Store::run`] makes the call. Scripts of one shape
//! are rows of [`script!`], a declarative table, instead of a file each
//! that repeats the shape (see `sweeps.rs` and `tag_pages.rs`).

use super::call::Call;
use super::{ScriptDef, Status, Store};
use crate::error::Result;
use crate::redis::Fields;

/// One script's Rust side: what the library registers, what a call sends
/// and what its reply means.
pub(crate) trait Script {
    /// Its name, source and flags.
    const DEF: &'static ScriptDef;
    /// What a call is made from (the arguments in order).
    type Input<'a>;
    /// What its reply says.
    type Output;
    /// Writes the call's arguments.
    fn args(input: Self::Input<'_>, call: &mut Call);
    /// Reads its reply.
    fn decode(reply: (Status, Fields)) -> Result<Self::Output>;
}

impl Store {
    /// One call of script `S` on partition `part`.
    pub(crate) async fn run<S: Script>(
        &self,
        part: usize,
        input: S::Input<'_>,
    ) -> Result<S::Output> {
        S::decode(self.send(self.call_of::<S>(part, input)).await?)
    }

    /// The call [`run`](Self::run) sends, for a caller that sets its
    /// deadline or its wait ([`Call::until`], [`Call::within`]) or acts on
    /// its failure before it reads the reply with `S::decode`.
    pub(crate) fn call_of<S: Script>(&self, part: usize, input: S::Input<'_>) -> Call {
        let mut call = self.script(S::DEF, part);
        S::args(input, &mut call);
        call
    }
}

/// Declares scripts as rows: each row a type implementing [`Script`], its
/// name (the `.lua` file beside this one), its flags, its arguments in
/// order and the function that decodes its reply. An argument is written
/// as it comes, or as the expression after its `=>` (a tuple writes each
/// of its elements: one input, several arguments).
///
/// ```text
/// script! {
///     /// What it does.
///     Purge = "purge", when_full: true, acked: false, late_unknown: true,
///         (topic: &'a str, limit: u64) -> u64 = count;
///     /// An argument given as a Duration, sent in ms.
///     Cancel = "cancel", when_full: true, acked: true, late_unknown: true,
///         (id: &'a str, grace: Duration => grace.as_millis() as u64)
///             -> Option<JobState> = decode;
/// }
/// ```
macro_rules! script {
    ($(
        $(#[$doc:meta])*
        $ty:ident = $name:literal,
            when_full: $when_full:expr, acked: $acked:expr, late_unknown: $late:expr,
            ($($arg:ident: $t:ty $(=> $wire:expr)?),* $(,)?) -> $out:ty = $decode:path;
    )*) => {$(
        $(#[$doc])*
        pub(crate) struct $ty;

        impl $crate::store::script::Script for $ty {
            const DEF: &'static $crate::store::ScriptDef = &$crate::store::ScriptDef {
                name: $name,
                source: include_str!(concat!($name, ".lua")),
                when_full: $when_full,
                acked: $acked,
                late_unknown: $late,
            };
            type Input<'a> = ($($t,)*);
            type Output = $out;
            fn args(($($arg,)*): Self::Input<'_>, call: &mut $crate::store::call::Call) {
                $($(let $arg = $wire;)? call.arg($arg);)*
            }
            fn decode(
                reply: ($crate::store::Status, $crate::redis::Fields),
            ) -> $crate::error::Result<$out> {
                $decode(reply)
            }
        }
    )*};
}
pub(crate) use script;

//! Batches' names in Redis: the kinds of a batch's keys, the fields of its
//! hash and of a note, and the Lua table `BATCH` the scripts reach them by
//! (lib/batches.lua fills it with its helpers too).
//!
//! A batch lives in its home partition (its id's); its jobs live where
//! their ids put them. Each job of a batch carries the batch's id (job
//! field `y`, [`super::field::BATCH`]); its end (finished, dead, deleted) writes a note to
//! its own partition's notes stream, which the relay carries to the home.

/// Kinds of a batch's keys, after the prefix.
pub mod batch_kind {
    /// `{h}:b:<batch>`: the batch (hash, fields in [`super::batch_field`]),
    /// in its home partition.
    pub const BATCH: &str = "b:";
    /// `{h}:bm:<batch>`: member id -> its outcome as the home knows it
    /// (hash): [`super::outcome`]'s letters, or `p` while pending.
    pub const MEMBERS: &str = "bm:";
    /// `{p}:bl:<batch>`: the batch's live jobs in partition p (zset id ->
    /// 0, paged by id): what a cancel walks. A job leaves it when it is
    /// finished or deleted (a dead job stays: it is still there).
    pub const LIVE: &str = "bl:";
    /// `{h}:breserved`: `<batch>\n<id>` -> when the home took it in (ms),
    /// until its pusher confirms the push (or the relay finds the job).
    pub const RESERVED: &str = "breserved";
    /// `{h}:bk:<flow>`: a flow's children's results, child id -> its
    /// result (JSON), as their notes brought them (flows only).
    pub const RESULTS: &str = "bk:";
    /// `{p}:notes`: the partition's notes stream (fields in
    /// [`super::note_field`]), until the relay has carried them home.
    pub const NOTES: &str = "notes";
    /// `{p}:relayed`: the newest note the relay read here (its entry id).
    /// Written as the read's one write, so that the read's WAIT holds it
    /// until the partition's replicas have every note it read: no end a
    /// failover can take back goes home.
    pub const RELAYED: &str = "relayed";
    /// What a call that wrote notes publishes on its partition's wake
    /// channel (one message a call): the relay there looks.
    pub const NOTES_NOTICE: &str = "notes";
}

/// Fields of a batch's hash.
pub mod batch_field {
    /// open (jobs come), closed (its pusher is done; running jobs of the
    /// batch may still add), fired (the callback was pushed), cancelled.
    pub const STATE: &str = "s";
    /// `finished` (every job finished) or `settled` (finished or dead).
    pub const ON: &str = "on";
    /// The callback job: its id (in the home partition), topic, body,
    /// ttr (ms), retry intervals, most attempts.
    pub const CALLBACK_ID: &str = "ci";
    pub const CALLBACK_TOPIC: &str = "cq";
    pub const CALLBACK_BODY: &str = "cb";
    pub const CALLBACK_TTR: &str = "cr";
    pub const CALLBACK_RETRY: &str = "cp";
    pub const CALLBACK_MAX: &str = "cm";
    /// Flows only: the parent's delay after its release (ms), priority,
    /// tags (newline-separated); absent when none.
    pub const CALLBACK_DELAY: &str = "cd";
    pub const CALLBACK_PRIORITY: &str = "co";
    pub const CALLBACK_TAGS: &str = "ct";
    /// Flows only: the parent's W3C trace context (absent: untraced).
    pub const CALLBACK_TRACEPARENT: &str = "cx";
    pub const CALLBACK_TRACESTATE: &str = "cy";
    /// Flows only: the flow (its batch id) whose child this flow's parent
    /// is; absent on a tree's root.
    pub const UPPER: &str = "u";
    /// Flows only: what a dead child does: `fail` (the parent dies at
    /// once) or `ignore` (it counts as settled).
    pub const CHILD_DEAD: &str = "k";
    /// Flows only: bytes of children's results kept (at most
    /// [`crate::flow::MAX_CHILDREN_RESULTS_BYTES`]).
    pub const RESULT_BYTES: &str = "rb";
    /// Flows only: the dead child that failed the parent.
    pub const FAILED_BY: &str = "fb";
    /// Jobs taken in, and how many of them finished, died, were deleted.
    pub const JOBS: &str = "n";
    pub const FINISHED: &str = "f";
    pub const DEAD: &str = "d";
    pub const DELETED: &str = "x";
    /// When it was created, and fired or cancelled (Unix ms, Redis time).
    pub const CREATED_AT: &str = "c";
    pub const ENDED_AT: &str = "e";
}

/// When a batch fires (its [`batch_field::ON`]).
pub mod batch_on {
    pub const FINISHED: &str = "finished";
    pub const SETTLED: &str = "settled";
}

/// A batch's states (its [`batch_field::STATE`]).
pub mod batch_state {
    pub const OPEN: &str = "open";
    pub const CLOSED: &str = "closed";
    pub const FIRED: &str = "fired";
    pub const CANCELLED: &str = "cancelled";
}

/// What a note says of a job: its outcome (also a member's letter in
/// [`batch_kind::MEMBERS`]).
pub mod outcome {
    pub const FINISHED: &str = "f";
    pub const DEAD: &str = "d";
    pub const DELETED: &str = "x";
    /// Taken in, no outcome yet.
    pub const PENDING: &str = "p";
}

/// A flow's child's outcome as its parent is handed it (field
/// [`super::field::CHILDREN`]; `crate::ChildOutcome`).
pub mod child_outcome {
    pub const FINISHED: &str = "finished";
    pub const DEAD: &str = "dead";
    pub const DELETED: &str = "deleted";
    pub const PENDING: &str = "pending";
}

/// Fields of a note (`{p}:notes`).
pub mod note_field {
    pub const BATCH: &str = "b";
    pub const ID: &str = "i";
    pub const OUTCOME: &str = "o";
    /// Flows only: a finished child's result (JSON), for its parent.
    pub const RESULT: &str = "r";
}

/// Batches' names, as fields of one Lua table `BATCH`: the library is near
/// Lua's limit of 200 locals in one function.
pub(super) const LUA_NAMES: &[(&str, &str)] = &[
    ("KEY", batch_kind::BATCH),
    ("MEMBERS_KEY", batch_kind::MEMBERS),
    ("LIVE_KEY", batch_kind::LIVE),
    ("RESERVED_KEY", batch_kind::RESERVED),
    ("NOTES_KEY", batch_kind::NOTES),
    ("RELAYED_KEY", batch_kind::RELAYED),
    ("NOTES_NOTICE", batch_kind::NOTES_NOTICE),
    ("FIELD", super::field::BATCH),
    ("STATE", batch_field::STATE),
    ("ON", batch_field::ON),
    ("CALLBACK_ID", batch_field::CALLBACK_ID),
    ("CALLBACK_TOPIC", batch_field::CALLBACK_TOPIC),
    ("CALLBACK_BODY", batch_field::CALLBACK_BODY),
    ("CALLBACK_TTR", batch_field::CALLBACK_TTR),
    ("CALLBACK_RETRY", batch_field::CALLBACK_RETRY),
    ("CALLBACK_MAX", batch_field::CALLBACK_MAX),
    ("CALLBACK_DELAY", batch_field::CALLBACK_DELAY),
    ("CALLBACK_PRIORITY", batch_field::CALLBACK_PRIORITY),
    ("CALLBACK_TAGS", batch_field::CALLBACK_TAGS),
    ("CALLBACK_TRACEPARENT", batch_field::CALLBACK_TRACEPARENT),
    ("CALLBACK_TRACESTATE", batch_field::CALLBACK_TRACESTATE),
    ("UPPER", batch_field::UPPER),
    ("CHILD_DEAD", batch_field::CHILD_DEAD),
    ("RESULT_BYTES", batch_field::RESULT_BYTES),
    ("FAILED_BY", batch_field::FAILED_BY),
    ("RESULTS_KEY", batch_kind::RESULTS),
    ("CHILDREN", super::field::CHILDREN),
    ("N_RESULT", note_field::RESULT),
    ("EV_WAITING", super::event::WAITING),
    ("CHILD_FINISHED", child_outcome::FINISHED),
    ("CHILD_DEAD_NAME", child_outcome::DEAD),
    ("CHILD_DELETED", child_outcome::DELETED),
    ("CHILD_PENDING", child_outcome::PENDING),
    ("JOBS", batch_field::JOBS),
    ("FINISHED", batch_field::FINISHED),
    ("DEAD", batch_field::DEAD),
    ("DELETED", batch_field::DELETED),
    ("CREATED_AT", batch_field::CREATED_AT),
    ("ENDED_AT", batch_field::ENDED_AT),
    ("ON_FINISHED", batch_on::FINISHED),
    ("ON_SETTLED", batch_on::SETTLED),
    ("OPEN", batch_state::OPEN),
    ("CLOSED", batch_state::CLOSED),
    ("FIRED", batch_state::FIRED),
    ("CANCELLED", batch_state::CANCELLED),
    ("O_FINISHED", outcome::FINISHED),
    ("O_DEAD", outcome::DEAD),
    ("O_DELETED", outcome::DELETED),
    ("O_PENDING", outcome::PENDING),
    ("N_BATCH", note_field::BATCH),
    ("N_ID", note_field::ID),
    ("N_OUTCOME", note_field::OUTCOME),
    ("EV_CLOSED", super::event::BATCH_CLOSED),
    ("EV_FIRED", super::event::BATCH_FIRED),
    ("EV_CANCELLED", super::event::BATCH_CANCELLED),
];

/// `local BATCH = { ... }` for the prelude.
pub(super) fn lua_table() -> String {
    let mut out = String::from("local BATCH = { ");
    for (name, value) in LUA_NAMES {
        out.push_str(&format!("{name} = '{value}', "));
    }
    // A flow's batch id is its parent's id after this byte (see
    // crate::flow): no batch id given by a user holds a control character.
    out.push_str(&format!(
        "FLOW_MARK = '\\{}', MAX_RESULTS_BYTES = {}, MAX_ID_BYTES = {} }}\n",
        crate::flow::FLOW_MARK as u32,
        crate::flow::MAX_CHILDREN_RESULTS_BYTES,
        crate::batch::MAX_BATCH_ID_BYTES
    ));
    out
}

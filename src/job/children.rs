//! A flow parent's children as it is handed out (see the `flow` module):
//! each child's outcome and, if it finished with one, its result.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A flow parent's children, by child id.
pub type Children = BTreeMap<String, Child>;

/// What became of one child when its parent was released.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Child {
    pub outcome: ChildOutcome,
    /// Its result, if it finished with one and the parent's results were
    /// within the bound on a parent's results (`flow::MAX_CHILDREN_RESULTS_BYTES`); `Some(Null)` for
    /// a result of null.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
}

/// A child's outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum ChildOutcome {
    Finished,
    Dead,
    /// Cancelled or deleted before it finished.
    Deleted,
    /// None yet: its parent failed first (a sibling died).
    Pending,
}

impl ChildOutcome {
    pub const fn as_str(self) -> &'static str {
        match self {
            ChildOutcome::Finished => "finished",
            ChildOutcome::Dead => "dead",
            ChildOutcome::Deleted => "deleted",
            ChildOutcome::Pending => "pending",
        }
    }
}

/// The children as stored (a JSON object written by the store); a value
/// it cannot read is left out, not fatal: the parent is still handed out.
pub(crate) fn children_of(json: &str) -> Children {
    let read = |v: &serde_json::Value| -> Option<Child> {
        let mut c: Child = serde_json::from_value(v.clone()).ok()?;
        // A result of null is stored as null: keep it as Some(Null).
        if v.get("result").is_some_and(|r| r.is_null()) {
            c.result = Some(serde_json::Value::Null);
        }
        Some(c)
    };
    match serde_json::from_str::<BTreeMap<String, serde_json::Value>>(json) {
        Ok(map) => map
            .into_iter()
            .filter_map(|(id, v)| read(&v).map(|c| (id, c)))
            .collect(),
        Err(_) => Children::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_outcomes_and_results_as_the_store_writes_them() {
        let c = children_of(
            r#"{"a":{"outcome":"finished","result":{"n":1}},"b":{"outcome":"dead"},"c":{"outcome":"finished","result":null},"d\/e":{"outcome":"pending"}}"#,
        );
        assert_eq!(c["a"].outcome, ChildOutcome::Finished);
        assert_eq!(c["a"].result, Some(serde_json::json!({"n": 1})));
        assert_eq!(c["b"].outcome, ChildOutcome::Dead);
        assert_eq!(c["b"].result, None);
        assert_eq!(c["c"].result, Some(serde_json::Value::Null));
        assert_eq!(c["d/e"].outcome, ChildOutcome::Pending);
        assert!(children_of("not json").is_empty());
        for o in [
            ChildOutcome::Finished,
            ChildOutcome::Dead,
            ChildOutcome::Deleted,
            ChildOutcome::Pending,
        ] {
            assert_eq!(serde_json::to_value(o).unwrap(), o.as_str());
        }
    }
}

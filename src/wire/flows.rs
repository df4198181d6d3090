//! `/v1/flows`: a parent job that waits for its children, a tree pushed in
//! one request (see [`crate::flow`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::JobSpec;
use crate::job::ChildOutcome;

/// What a parent does when one of its children dies.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum ChildDeadSpec {
    /// The parent dies at once, its error naming the child.
    #[default]
    Fail,
    /// The dead child counts as done; the parent runs when the rest are.
    Ignore,
}

/// `POST /v1/flows`: a job of a flow, with the fields of `POST /v1/jobs`,
/// and its children, each a node like this one. The root is a parent (it
/// has children). A parent needs an `id` (it names its flow); its
/// `delay_ms` counts from when its children are done; it takes no group,
/// dedup, `due_at` or batch. A leaf takes no batch or dedup, and is only
/// created (an id in use: 409).
#[derive(Serialize, Debug, Clone, Default)]
pub struct FlowSpec {
    #[serde(flatten)]
    pub job: JobSpec,
    /// At most 10,000 a parent, 20,000 jobs a flow, 16 levels.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<FlowSpec>,
    /// A parent's only (default fail).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_child_dead: Option<ChildDeadSpec>,
}

/// The schema is `JobSpec`'s object with the two fields of a flow added,
/// not an allOf of the two: `JobSpec` refuses fields it does not name
/// (`additionalProperties: false`), which would refuse `children`.
#[cfg(feature = "server")]
impl utoipa::PartialSchema for FlowSpec {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ArrayBuilder, Schema};
        use utoipa::openapi::{Ref, RefOr};
        let RefOr::T(Schema::Object(mut node)) = <JobSpec as utoipa::PartialSchema>::schema()
        else {
            unreachable!("JobSpec is an object")
        };
        node.description = Some(
            "`POST /v1/flows`: a job of a flow, with the fields of `POST /v1/jobs`, and its \
             children, each a node like this one. The root is a parent (it has children). A \
             parent needs an `id` (it names its flow); its `delay_ms` counts from when its \
             children are done; it takes no group, dedup, `due_at` or batch. A leaf takes no \
             batch or dedup, and is only created (an id in use: 409)."
                .into(),
        );
        let children = ArrayBuilder::new()
            .items(Ref::from_schema_name("FlowSpec"))
            .description(Some(
                "Its children: at most 10,000 a parent, 20,000 jobs a flow, 16 levels.",
            ));
        node.properties.insert("children".into(), children.into());
        let mut dead = Ref::from_schema_name("ChildDeadSpec");
        dead.description = "A parent's only (default fail): what a dead child does.".into();
        node.properties.insert("on_child_dead".into(), dead.into());
        RefOr::T(Schema::Object(node))
    }
}

#[cfg(feature = "server")]
impl utoipa::ToSchema for FlowSpec {
    fn schemas(
        schemas: &mut Vec<(
            String,
            utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>,
        )>,
    ) {
        use utoipa::PartialSchema;
        schemas.push(("JobSpec".into(), JobSpec::schema()));
        <JobSpec as utoipa::ToSchema>::schemas(schemas);
        schemas.push(("ChildDeadSpec".into(), ChildDeadSpec::schema()));
    }
}

/// A node is read as a job (unknown fields refused, as `POST /v1/jobs`
/// refuses them) once `children` and `on_child_dead` are taken out; an
/// error below the root names where it is (`children[1].children[0]`) and
/// the job's id, if it has one.
impl<'de> Deserialize<'de> for FlowSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        let mut node = serde_json::Map::<String, serde_json::Value>::deserialize(d)?;
        let children = match node.remove("children") {
            None => Vec::new(),
            Some(serde_json::Value::Array(items)) => items
                .into_iter()
                .enumerate()
                .map(|(i, v)| {
                    let id = v.get("id").and_then(|id| id.as_str()).map(str::to_owned);
                    FlowSpec::deserialize(v).map_err(|e| {
                        let at = match id {
                            Some(id) => format!("children[{i}] ({id:?})"),
                            None => format!("children[{i}]"),
                        };
                        let e = e.to_string();
                        let sep = if e.starts_with("children[") {
                            "."
                        } else {
                            ": "
                        };
                        D::Error::custom(format!("{at}{sep}{e}"))
                    })
                })
                .collect::<Result<_, _>>()?,
            Some(other) => {
                return Err(D::Error::custom(format!(
                    "children must be a list of jobs, not {other}"
                )))
            }
        };
        let on_child_dead = node
            .remove("on_child_dead")
            .map(|v| {
                ChildDeadSpec::deserialize(&v).map_err(|_| {
                    D::Error::custom(format!(
                        "on_child_dead must be \"fail\" or \"ignore\", not {v}"
                    ))
                })
            })
            .transpose()?;
        let job =
            JobSpec::deserialize(serde_json::Value::Object(node)).map_err(D::Error::custom)?;
        Ok(FlowSpec {
            job,
            children,
            on_child_dead,
        })
    }
}

/// `POST /v1/flows`' reply.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "server", schema(as = FlowPushed))]
pub struct FlowPushedBody {
    /// The root's id (the flow's).
    pub id: String,
    /// Every job's id, parents before their children (level by level, each
    /// parent's children in the order given), ids delayq picked included.
    pub jobs: Vec<String>,
}

/// A flow, by its parent's id: its state and its children's counts. Kept
/// after its parent's release or cancel for the result retention.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "server", schema(as = Flow))]
pub struct FlowBody {
    /// The parent's id and topic.
    pub id: String,
    pub topic: String,
    /// adding, waiting, released (the parent was pushed: read it as a
    /// job), failed (a child died: the parent is dead) or cancelled.
    pub state: String,
    /// fail or ignore.
    pub on_child_dead: String,
    /// Children taken in; of them finished, dead, deleted, and pending (no
    /// outcome yet).
    pub children: u64,
    pub finished: u64,
    pub dead: u64,
    pub deleted: u64,
    pub pending: u64,
    /// The child whose death failed the parent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_by: Option<String>,
    /// The flow this parent is a child of (its parent's id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    pub created_at_ms: i64,
    /// When its parent was released, failed or was cancelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at_ms: Option<i64>,
}

impl From<crate::flow::Flow> for FlowBody {
    fn from(f: crate::flow::Flow) -> Self {
        FlowBody {
            id: f.id,
            topic: f.topic,
            state: f.state.as_str().to_owned(),
            on_child_dead: f.on_child_dead.as_str().to_owned(),
            children: f.children,
            finished: f.finished,
            dead: f.dead,
            deleted: f.deleted,
            pending: f.pending,
            failed_by: f.failed_by,
            parent: f.parent,
            created_at_ms: f.created_ms,
            ended_at_ms: f.ended_ms,
        }
    }
}

/// `POST /v1/flows/{id}/cancel`'s reply.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct FlowCancelled {
    /// Jobs deleted, down the tree (those not handed out yet).
    pub deleted: u64,
}

/// A flow parent's child as the parent is handed out.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "server", schema(as = Child))]
pub struct ChildBody {
    /// finished, dead, deleted (cancelled or deleted before it finished)
    /// or pending (none yet: a sibling's death failed the parent first).
    pub outcome: ChildOutcome,
    /// Its result (any JSON value, null included), if it finished with
    /// one and the parent's children's results are within 1 MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
}

/// A flow parent's children, by child id.
pub type ChildrenBody = BTreeMap<String, ChildBody>;

/// The wire form of a parent's children.
pub fn children_body(children: crate::job::Children) -> ChildrenBody {
    children
        .into_iter()
        .map(|(id, c)| {
            (
                id,
                ChildBody {
                    outcome: c.outcome,
                    result: c.result,
                },
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node reads as a job plus its children; an error below the root
    /// says where, and a job's own checks (unknown fields) still hold.
    #[test]
    fn a_flow_node_reads_as_a_job_with_children() {
        let f: FlowSpec = serde_json::from_str(
            r#"{"id":"p","topic":"close","on_child_dead":"ignore",
                "children":[{"id":"a","topic":"refund","delay_ms":5},{"topic":"refund"}]}"#,
        )
        .unwrap();
        assert_eq!(f.job.id.as_deref(), Some("p"));
        assert_eq!(f.on_child_dead, Some(ChildDeadSpec::Ignore));
        assert_eq!(f.children.len(), 2);
        assert_eq!(f.children[0].job.delay_ms, Some(5));
        assert!(f.children[1].children.is_empty());
        let back: FlowSpec = serde_json::from_value(serde_json::to_value(&f).unwrap()).unwrap();
        assert_eq!(back.children[0].job.id.as_deref(), Some("a"));
        for (text, said) in [
            (
                r#"{"id":"p","topic":"t","children":[{"topic":"t"},{"id":"b","topic":"t","children":[{"topic":"t","colour":1}]}]}"#,
                "children[1] (\"b\").children[0]: unknown field `colour`",
            ),
            (
                r#"{"id":"p","topic":"t","on_child_dead":"maybe"}"#,
                "on_child_dead must be \"fail\" or \"ignore\", not \"maybe\"",
            ),
            (
                r#"{"id":"p","topic":"t","children":{"topic":"t"}}"#,
                "children must be a list of jobs",
            ),
        ] {
            let e = serde_json::from_str::<FlowSpec>(text).unwrap_err();
            assert!(e.to_string().contains(said), "{e}");
        }
    }
}

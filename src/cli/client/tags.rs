//! `tags list|cancel|reschedule TAG`: every page of a tag's jobs, the
//! cursor sent back until the server says there are no more.

use std::time::Duration;

use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use delayq::wire::{DueAt, TagCancelSpec, TagChanged, TagJobs, TagRescheduleSpec};
use reqwest::Method;

use super::http::{encode, Client};
use super::out::{local_time, name, outln, print, table};
use super::{duration_with_unit, parse_at, ClientArgs};

#[derive(Args, Debug)]
pub struct Tags {
    #[command(subcommand)]
    command: TagsCommand,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Subcommand, Debug)]
pub enum TagsCommand {
    /// List the tag's jobs (every page).
    List {
        #[arg(value_parser = tag_arg)]
        tag: String,
        /// Jobs per page (1 to 1000).
        #[arg(long, default_value_t = delayq::defaults::TAG_PAGE)]
        limit: usize,
    },
    /// Delete the tag's jobs not handed out (reserved ones are reported).
    Cancel {
        #[arg(value_parser = tag_arg)]
        tag: String,
        #[arg(long, default_value_t = delayq::defaults::TAG_PAGE)]
        limit: usize,
    },
    /// Move the tag's delayed and ready jobs, never before now.
    Reschedule {
        #[arg(value_parser = tag_arg)]
        tag: String,
        /// Shift each job's due time: 1h, 15d; "-2h" moves earlier.
        #[arg(long, allow_hyphen_values = true, value_parser = signed_duration, conflicts_with = "at", required_unless_present = "at")]
        shift: Option<i64>,
        /// One due time for all: Unix ms or RFC 3339 with a zone.
        #[arg(long, value_parser = parse_at)]
        at: Option<DueAt>,
        #[arg(long, default_value_t = delayq::defaults::TAG_PAGE)]
        limit: usize,
    },
}

/// A duration with a unit, maybe negative, in ms.
fn signed_duration(text: &str) -> Result<i64, String> {
    let (sign, rest) = match text.trim().strip_prefix('-') {
        Some(rest) => (-1, rest),
        None => (1, text.trim()),
    };
    let d: Duration = duration_with_unit(rest)?;
    Ok(sign * d.as_millis().min(i64::MAX as u128) as i64)
}

/// A tag as a push would take it: one the URL would lose (`.`, `..`)
/// is refused here rather than reaching another route.
fn tag_arg(tag: &str) -> Result<String, String> {
    delayq::job::check_tag(tag)?;
    Ok(tag.to_owned())
}

fn tag_path(tag: &str) -> String {
    format!("/v1/tags/{}", encode(tag))
}

impl Tags {
    pub(super) async fn run(self) -> Result<()> {
        let c = Client::new(&self.client);
        match self.command {
            TagsCommand::List { tag, limit } => {
                let mut cursor: Option<String> = None;
                let mut rows = vec![["id", "topic", "state", "due at"].map(String::from)];
                loop {
                    let mut path = format!("{}/jobs?limit={limit}", tag_path(&tag));
                    if let Some(cur) = &cursor {
                        path.push_str(&format!("&cursor={}", encode(cur)));
                    }
                    let reply = c.fetch::<TagJobs>(Method::GET, &path).await?;
                    if c.json {
                        print(&c.text(&reply, |_, _| ())?)?;
                    }
                    for j in &reply.value.jobs {
                        rows.push([
                            j.id.clone(),
                            j.topic.clone(),
                            name(&j.state),
                            local_time(Some(j.due_at_ms)),
                        ]);
                    }
                    match reply.value.cursor {
                        Some(next) => cursor = Some(next),
                        None => break,
                    }
                }
                if !c.json {
                    let mut o = String::new();
                    if rows.len() == 1 {
                        outln!(o, "no job carries tag {tag}");
                    } else {
                        table(&mut o, &rows);
                    }
                    print(&o)?;
                }
                Ok(())
            }
            TagsCommand::Cancel { tag, limit } => {
                let path = format!("{}/cancel", tag_path(&tag));
                pages(&c, &tag, &path, |cursor| {
                    serde_json::to_value(TagCancelSpec {
                        limit: Some(limit),
                        cursor,
                    })
                })
                .await
            }
            TagsCommand::Reschedule {
                tag,
                shift,
                at,
                limit,
            } => {
                if shift.is_none() && at.is_none() {
                    bail!("give --shift or --at");
                }
                let path = format!("{}/reschedule", tag_path(&tag));
                pages(&c, &tag, &path, |cursor| {
                    serde_json::to_value(TagRescheduleSpec {
                        shift_ms: shift,
                        due_at: at.clone(),
                        limit: Some(limit),
                        cursor,
                    })
                })
                .await
            }
        }
    }
}

/// Posts page after page; prints how many changed and the jobs left alone
/// (or that no job carries `tag`).
async fn pages(
    c: &Client,
    tag: &str,
    path: &str,
    body: impl Fn(Option<String>) -> serde_json::Result<serde_json::Value>,
) -> Result<()> {
    let (mut changed, mut skipped, mut cursor) = (0, Vec::new(), None);
    loop {
        let reply = c
            .call::<TagChanged>(Method::POST, path, Some(&body(cursor.take())?))
            .await?;
        if c.json {
            print(&c.text(&reply, |_, _| ())?)?;
        }
        changed += reply.value.changed;
        skipped.extend(reply.value.skipped);
        match reply.value.cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    if !c.json {
        let mut o = String::new();
        if changed == 0 && skipped.is_empty() {
            outln!(o, "no job carries tag {tag}");
        } else {
            outln!(o, "changed: {changed}");
        }
        for s in &skipped {
            outln!(o, "left alone: {} ({})", s.id, name(&s.state));
        }
        print(&o)?;
    }
    Ok(())
}

//! Webhook delivery against real local HTTP receivers started by the tests
//! (some of them hostile), the Prometheus metrics that count it, and the
//! settings checked at start.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::*;
use axum::http::{HeaderMap, StatusCode};
use axum::routing;
use axum::Router;
use delayq::webhook::{self, Secret, Webhook};
use delayq::{JobState, NewJob, Queue, RetryPolicy, Shutdown};
use serde_json::Value;

mod ahead;
mod delivery;
mod plain_http;
mod receivers;
mod settings;
mod status;

/// One request a receiver saw.
#[derive(Clone, Debug)]
struct Hit {
    at: Instant,
    headers: HeaderMap,
    body: Vec<u8>,
}

/// What the receiver answers to its n-th request (0-based).
type Behaviour = Arc<dyn Fn(usize) -> Reply + Send + Sync>;

enum Reply {
    Status(u16),
    Hang,
}

/// A local HTTP endpoint that records every request.
struct Receiver {
    url: String,
    hits: Arc<Mutex<Vec<Hit>>>,
}

impl Receiver {
    async fn start(behaviour: impl Fn(usize) -> Reply + Send + Sync + 'static) -> Receiver {
        let hits: Arc<Mutex<Vec<Hit>>> = Default::default();
        let behaviour: Behaviour = Arc::new(behaviour);
        let app = Router::new().route(
            "/hook",
            routing::post({
                let hits = hits.clone();
                move |headers: HeaderMap, body: axum::body::Bytes| {
                    let (hits, behaviour) = (hits.clone(), behaviour.clone());
                    async move {
                        let n = {
                            let mut h = hits.lock().unwrap();
                            h.push(Hit {
                                at: Instant::now(),
                                headers,
                                body: body.to_vec(),
                            });
                            h.len() - 1
                        };
                        match behaviour(n) {
                            Reply::Status(s) => {
                                (StatusCode::from_u16(s).unwrap(), "receiver says so")
                            }
                            Reply::Hang => {
                                std::future::pending::<()>().await;
                                unreachable!()
                            }
                        }
                    }
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Receiver { url, hits }
    }

    fn hits(&self) -> Vec<Hit> {
        self.hits.lock().unwrap().clone()
    }
}

async fn push(q: &Queue, id: &str, topic: &str, retry: RetryPolicy) {
    q.push(&NewJob {
        id: id.into(),
        topic: topic.into(),
        body: format!("body of {id}"),
        retry: Some(retry),
        ttr: Duration::from_secs(30),
        ..NewJob::default()
    })
    .await
    .unwrap();
}

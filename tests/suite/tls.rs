//! Redis over TLS (`rediss://`): a redis-server started with TLS on and
//! certificates made here with openssl, a CA of the test's own.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::common::*;
use delayq::Tls;
use delayq::{Config, Queue};

/// A CA, a server certificate for localhost and a client certificate, in
/// `dir`.
pub(crate) struct Certs {
    dir: tempfile::TempDir,
}

impl Certs {
    pub(crate) fn make() -> Certs {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let openssl = |args: &[&str]| {
            let out = Command::new("openssl")
                .args(args)
                .current_dir(d)
                .output()
                .expect("openssl must be installed (apt-get install -y openssl)");
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        openssl(&[
            "req",
            "-x509",
            "-new",
            "-nodes",
            "-newkey",
            "rsa:2048",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "2",
            "-subj",
            "/CN=delayq test CA",
        ]);
        std::fs::write(
            d.join("server.ext"),
            "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
        )
        .unwrap();
        std::fs::write(d.join("client.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
        for (name, cn) in [("server", "localhost"), ("client", "delayq")] {
            openssl(&[
                "req",
                "-new",
                "-nodes",
                "-newkey",
                "rsa:2048",
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.csr"),
                "-subj",
                &format!("/CN={cn}"),
            ]);
            openssl(&[
                "x509",
                "-req",
                "-in",
                &format!("{name}.csr"),
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &format!("{name}.crt"),
                "-days",
                "2",
                "-extfile",
                &format!("{name}.ext"),
            ]);
        }
        Certs { dir }
    }

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn arg(&self, name: &str) -> String {
        self.path(name).to_str().unwrap().to_owned()
    }

    /// redis-server TLS options; `clients`: "no" or "yes" (certificates
    /// required).
    pub(crate) fn server(&self, clients: &str) -> RedisServer {
        let (cert, key, ca) = (
            self.arg("server.crt"),
            self.arg("server.key"),
            self.arg("ca.crt"),
        );
        RedisServer::start_tls(&[
            "--tls-cert-file",
            &cert,
            "--tls-key-file",
            &key,
            "--tls-ca-cert-file",
            &ca,
            "--tls-auth-clients",
            clients,
        ])
    }
}

fn tls_queue(redis: &RedisServer, tls: Tls) -> Queue {
    Queue::connect(Config {
        redis: delayq::Redis::Url(redis.url()),
        tls,
        redis_timeout: Duration::from_secs(2),
        ..Config::default()
    })
    .unwrap()
}

fn file(p: &Path) -> Option<PathBuf> {
    Some(p.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_with_its_ca_carries_jobs_and_an_unknown_ca_is_named() {
    let certs = Certs::make();
    let redis = certs.server("no");
    let q = tls_queue(
        &redis,
        Tls {
            ca_file: file(&certs.path("ca.crt")),
            ..Tls::default()
        },
    );
    // The first calls make the TLS handshake too: a busy machine may take
    // longer than their timeout.
    retried("the first call", || q.check_connection()).await;
    let j = job("tls-1", "secure", 0, 60_000);
    retried("a push", || q.push(&j)).await;
    let d = q
        .pop(&topics(&["secure"]), Duration::from_secs(5))
        .await
        .unwrap()
        .expect("delivered over TLS");
    q.finish(&d.id, &d.token).await.unwrap();
    q.close().await;

    // The system's roots do not know the test's CA.
    let q = tls_queue(&redis, Tls::default());
    let e = q.check_connection().await.unwrap_err().to_string();
    assert!(e.to_lowercase().contains("certificate"), "{e}");
    q.close().await;

    // Insecure takes any certificate.
    let q = tls_queue(
        &redis,
        Tls {
            insecure: true,
            ..Tls::default()
        },
    );
    q.check_connection().await.unwrap();
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_asks_for_a_client_certificate_gets_one() {
    let certs = Certs::make();
    let redis = certs.server("yes");
    let ca = file(&certs.path("ca.crt"));
    let q = tls_queue(
        &redis,
        Tls {
            ca_file: ca.clone(),
            ..Tls::default()
        },
    );
    assert!(
        q.check_connection().await.is_err(),
        "in without a certificate"
    );
    q.close().await;
    let q = tls_queue(
        &redis,
        Tls {
            ca_file: ca,
            cert_file: file(&certs.path("client.crt")),
            key_file: file(&certs.path("client.key")),
            insecure: false,
        },
    );
    q.check_connection().await.unwrap();
    q.push(&job("tls-2", "secure", 0, 60_000)).await.unwrap();
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_takes_the_tls_flags_and_says_when_checks_are_off() {
    let certs = Certs::make();
    let redis = certs.server("no");
    let url = redis.url();
    let ca = certs.arg("ca.crt");
    let p = DelayqProcess::spawn(&["--redis", &url, "--redis-ca", &ca]);
    let pushed = post(
        &p.base,
        "/push",
        r#"{"topic":"t","id":"1","delay":1,"ttr":5}"#,
    )
    .await;
    assert_eq!(pushed["code"], 0, "{pushed}");
    p.terminate();
    let (p, logs) = DelayqProcess::spawn_logged(&["--redis", &url, "--redis-insecure"]);
    log_line(&logs, "certificate is NOT checked", Duration::from_secs(10));
    p.terminate();
    // Without the CA, serve does not start, and says why.
    let out = Command::new(env!("CARGO_BIN_EXE_delayq"))
        .args(["serve", "--listen", "127.0.0.1:0", "--redis", &url])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot reach redis") && err.contains("--redis-ca"),
        "{err}"
    );
}

/// One request an [`HttpsReceiver`] saw: method, path, body.
pub(crate) type Request = (String, String, Vec<u8>);

/// A local HTTPS endpoint with the certificate `certs` made for localhost:
/// it records every request and answers 200 with `reply` (JSON).
pub(crate) struct HttpsReceiver {
    /// `https://localhost:PORT`
    pub base: String,
    pub seen: std::sync::Arc<std::sync::Mutex<Vec<Request>>>,
    task: tokio::task::JoinHandle<()>,
}

impl HttpsReceiver {
    pub(crate) async fn start(certs: &Certs, reply: &'static str) -> HttpsReceiver {
        use http_body_util::BodyExt;
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_file_iter(certs.path("server.crt"))
                .unwrap()
                .map(Result::unwrap)
                .collect();
        let key = PrivateKeyDer::from_pem_file(certs.path("server.key")).unwrap();
        let config = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
            delayq::https::ring_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!(
            "https://localhost:{}",
            listener.local_addr().unwrap().port()
        );
        let seen: std::sync::Arc<std::sync::Mutex<Vec<Request>>> = Default::default();
        let task = tokio::spawn({
            let seen = seen.clone();
            async move {
                loop {
                    let Ok((tcp, _)) = listener.accept().await else {
                        return;
                    };
                    let (acceptor, seen) = (acceptor.clone(), seen.clone());
                    tokio::spawn(async move {
                        // A client that refuses the certificate ends here.
                        let Ok(tls) = acceptor.accept(tcp).await else {
                            return;
                        };
                        let service = hyper::service::service_fn(
                            move |req: hyper::Request<hyper::body::Incoming>| {
                                let seen = seen.clone();
                                async move {
                                    let (parts, body) = req.into_parts();
                                    let body = body.collect().await?.to_bytes().to_vec();
                                    seen.lock().unwrap().push((
                                        parts.method.to_string(),
                                        parts.uri.path().to_owned(),
                                        body,
                                    ));
                                    Ok::<_, hyper::Error>(
                                        hyper::Response::builder()
                                            .header("content-type", "application/json")
                                            .body(http_body_util::Full::new(
                                                bytes::Bytes::from_static(reply.as_bytes()),
                                            ))
                                            .unwrap(),
                                    )
                                }
                            },
                        );
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                            .await;
                    });
                }
            }
        });
        HttpsReceiver { base, seen, task }
    }

    pub(crate) fn seen(&self) -> Vec<Request> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for HttpsReceiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

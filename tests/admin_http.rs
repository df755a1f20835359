//! The admin HTTP listener (`server.admin_listen`): `/metrics` shows what
//! the generators did (ids issued, next id, floor) as Prometheus text,
//! `/healthz` answers probes, and nothing an HTTP client sends breaks it.

mod support;

use mysql_async::prelude::Queryable;
use mysql_async::Conn;
use std::net::SocketAddr;
use support::proxy::{self, Proxy, ProxyProcess};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Sends `request` and returns the whole response (the server closes).
async fn http(addr: SocketAddr, request: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(request).await.expect("send");
    let mut out = Vec::new();
    // Only tells a server that never answers from a slow one.
    tokio::time::timeout(std::time::Duration::from_secs(60), s.read_to_end(&mut out))
        .await
        .expect("answered in time")
        .expect("read");
    String::from_utf8_lossy(&out).into_owned()
}

async fn get(addr: SocketAddr, path: &str) -> String {
    http(
        addr,
        format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes(),
    )
    .await
}

/// The value of the sample line `name` (with its labels) in `metrics`.
fn sample(metrics: &str, name: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test]
async fn metrics_show_what_the_generators_did() {
    let Some(tb) = support::testbed() else { return };
    let schema = support::unique("http");
    proxy::create_schema(&tb, &schema).await;
    let rules = format!(
        "[[generator]]\nname = \"orders\"\nkind = \"sequence\"\nbatch = 100\nstart = 500\n\n\
         [[table]]\nname = \"{schema}.t\"\ncolumn = \"id\"\ngenerator = \"orders\"\n"
    );
    let p = Proxy::start_rules(&tb, &rules, &format!("/{schema}")).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin = listener.local_addr().unwrap();
    let server = tokio::spawn(idgate::http::serve(listener, p.shared.clone()));

    let mut c = Conn::new(p.opts(Some(&schema))).await.unwrap();
    c.query_drop("CREATE TABLE t (id BIGINT PRIMARY KEY, k INT)")
        .await
        .unwrap();
    c.query_drop("INSERT INTO t (k) VALUES (1), (2), (3)")
        .await
        .unwrap();
    let g = "{generator=\"orders\",kind=\"sequence\"}";
    let first = get(admin, "/metrics").await;
    assert_eq!(
        sample(&first, &format!("idgate_generator_issued_total{g}")),
        Some(3.0),
        "{first}"
    );
    assert_eq!(
        sample(&first, &format!("idgate_generator_next_id{g}")),
        Some(503.0),
        "{first}"
    );
    // An explicit id above the segment: the rest of it is skipped.
    c.query_drop("INSERT INTO t (id, k) VALUES (9000, 4)")
        .await
        .unwrap();
    // The next generated id comes above it (the generator refills first).
    c.query_drop("INSERT INTO t (k) VALUES (5)").await.unwrap();
    let last = c.last_insert_id().expect("an id");
    assert!(last > 9000, "{last}");
    let r = get(admin, "/metrics").await;
    assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
    assert!(r.contains("Content-Type: text/plain; version=0.0.4"), "{r}");
    let body = r.split("\r\n\r\n").nth(1).expect("a body");
    assert_eq!(
        sample(body, &format!("idgate_generator_floor{g}")),
        Some(9000.0),
        "{body}"
    );
    let next = sample(body, &format!("idgate_generator_next_id{g}")).expect("next id");
    assert!(next > last as f64, "the next id after the last one: {body}");
    assert_eq!(
        sample(body, &format!("idgate_generator_lease_valid{g}")),
        Some(1.0)
    );
    assert_eq!(sample(body, "idgate_sessions"), Some(1.0), "{body}");
    assert_eq!(
        sample(body, "idgate_sessions_opened_total"),
        Some(1.0),
        "{body}"
    );
    // A second session: opened, then gone (the gauge drops once idgate has
    // seen the quit; the counter keeps it).
    let other = Conn::new(p.opts(Some(&schema))).await.unwrap();
    other.disconnect().await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let body = loop {
        let r = get(admin, "/metrics").await;
        let body = r.split("\r\n\r\n").nth(1).expect("a body").to_string();
        if sample(&body, "idgate_sessions") == Some(1.0) {
            break body;
        }
        assert!(std::time::Instant::now() < deadline, "{body}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(
        sample(&body, "idgate_sessions_opened_total"),
        Some(2.0),
        "{body}"
    );
    // Every sample line has a number.
    for l in body
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        assert!(l.rsplit(' ').next().unwrap().parse::<f64>().is_ok(), "{l}");
    }

    let r = get(admin, "/healthz").await;
    assert!(
        r.starts_with("HTTP/1.1 200 OK\r\n") && r.ends_with("ok\n"),
        "{r}"
    );
    let r = http(admin, b"HEAD /metrics HTTP/1.1\r\n\r\n").await;
    assert!(
        r.starts_with("HTTP/1.1 200 OK\r\n") && r.ends_with("\r\n\r\n"),
        "{r}"
    );
    assert!(get(admin, "/nope").await.starts_with("HTTP/1.1 404 "));
    let r = http(
        admin,
        b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
    )
    .await;
    assert!(r.starts_with("HTTP/1.1 405 "), "{r}");
    for junk in [
        &b"\x00\xff\r\n\r\n"[..],
        b"GET\r\n\r\n",
        b"hello",
        &[b'A'; 20_000],
    ] {
        let r = http(admin, junk).await;
        assert!(
            r.is_empty() || r.starts_with("HTTP/1.1 400 "),
            "{junk:?}: {r}"
        );
    }
    // Still serving, and MySQL sessions untouched.
    assert!(get(admin, "/healthz").await.starts_with("HTTP/1.1 200 OK"));
    let n: Option<u64> = c.query_first("SELECT COUNT(*) FROM t").await.unwrap();
    assert_eq!(n, Some(5));
    drop(c);
    server.abort();
    proxy::teardown(&tb, p, &schema).await;
}

/// The binary serves it when `server.admin_listen` is set.
#[tokio::test]
async fn the_binary_serves_admin_listen() {
    let Some(tb) = support::testbed() else { return };
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let admin: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let p = ProxyProcess::spawn(&tb, &format!("admin_listen = \"{admin}\"\n")).await;
    let r = get(admin, "/healthz").await;
    assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
    let r = get(admin, "/metrics").await;
    assert!(r.contains("\r\n\r\n# HELP idgate_sessions"), "{r}");
    drop(p);
}

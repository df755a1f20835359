//! The admin HTTP listener (`server.admin_listen`): `GET /metrics` in the
//! Prometheus text format, `GET /healthz` for probes.
//!
//! What DBAs watch: every generator's next id, high-water mark, cached ids,
//! batch, rate, ids issued, floor, waits, store calls and lease (the same
//! numbers as `SHOW IDGATE GENERATORS`), and the sessions open. `/healthz`
//! answers 200 while every generator can issue ids (a snowflake generator
//! without a valid node lease cannot), 503 otherwise, with one line per
//! generator that cannot.
//!
//! HTTP/1.1, one request per connection, GET and HEAD only; a request head
//! over 8 KiB or slower than 5 s is dropped. Nothing a client sends can
//! reach the MySQL sessions.

use crate::frontend::Shared;
use crate::idgen::GeneratorStats;
use crate::rules::spec::GeneratorKind;
use std::fmt::Write;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tracing::{debug, warn};

/// Largest request head read.
const MAX_HEAD: usize = 8 * 1024;

/// Time allowed to send the request head.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Serves admin requests on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let shared = shared.clone();
                tokio::spawn(async move {
                    if let Err(e) = answer(stream, &shared).await {
                        debug!("admin request: {e}");
                    }
                });
            }
            Err(e) => {
                warn!("admin listener: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Reads one request and answers it.
async fn answer(mut stream: TcpStream, shared: &Shared) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let read = tokio::time::timeout(READ_TIMEOUT, async {
        let mut buf = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_HEAD {
            let n = stream.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            head.extend_from_slice(&buf[..n]);
        }
        Ok::<_, std::io::Error>(())
    })
    .await;
    if !matches!(read, Ok(Ok(()))) {
        return Ok(());
    }
    let (status, content_type, body, head_only) = respond(&head, shared);
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if !head_only {
        out.extend_from_slice(body.as_bytes());
    }
    stream.write_all(&out).await?;
    stream.shutdown().await
}

/// The status line, content type and body for a request head; whether the
/// body is left out (HEAD).
fn respond(head: &[u8], shared: &Shared) -> (&'static str, &'static str, String, bool) {
    const TEXT: &str = "text/plain; charset=utf-8";
    let line = head
        .split(|&b| b == b'\n')
        .next()
        .and_then(|l| std::str::from_utf8(l).ok())
        .unwrap_or("");
    let mut parts = line.trim_end().split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let version_ok = parts.next().is_some_and(|v| v.starts_with("HTTP/1."));
    if !version_ok {
        return ("400 Bad Request", TEXT, "bad request\n".into(), false);
    }
    let head_only = method == "HEAD";
    if method != "GET" && !head_only {
        return (
            "405 Method Not Allowed",
            TEXT,
            "only GET and HEAD\n".into(),
            false,
        );
    }
    let stats = shared
        .allocator
        .as_ref()
        .map(|a| a.stats())
        .unwrap_or_default();
    let path = target.split('?').next().unwrap_or("");
    match path {
        "/metrics" => (
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            {
                let mut m = metrics(&stats, shared.sessions.len(), shared.sessions.opened());
                let guarded = shared.rules.load().map_or(0, |r| r.views().len() as u64);
                rules_metrics(
                    &mut m,
                    shared.rules.version(),
                    &shared.rules.status(),
                    guarded,
                );
                m + &login_metrics(&shared.login_throttle)
                    + &sha2_metrics(&shared.sha2)
                    + &pool_metrics(&shared.pools.iter().map(|p| p.view()).collect::<Vec<_>>())
                    + &reshard_metrics(&shared.pause.jobs(), &shared.pause.view())
                    + &shared
                        .session_threads
                        .load()
                        .as_ref()
                        .map(|w| session_thread_metrics(&w.sessions(), w.handed_off()))
                        .unwrap_or_default()
            },
            head_only,
        ),
        "/healthz" => {
            let bad: Vec<&GeneratorStats> = stats.iter().filter(|g| !g.lease_valid).collect();
            // A skewed clock does not stop issuing (the logical clock
            // keeps ids above the cluster's), but it is said here.
            let mut skew = String::new();
            for g in stats.iter().filter(|g| g.clock_skew_ms > 0) {
                let _ = writeln!(
                    skew,
                    "generator {}: clock {} ms behind the cluster high-water; issuing from a logical clock",
                    g.name, g.clock_skew_ms
                );
            }
            if bad.is_empty() {
                ("200 OK", TEXT, format!("ok\n{skew}"), head_only)
            } else {
                let mut body = String::new();
                for g in bad {
                    let why = g.last_error.as_deref().unwrap_or("no valid node lease");
                    let _ = writeln!(body, "generator {}: cannot issue ids: {why}", g.name);
                }
                ("503 Service Unavailable", TEXT, body, head_only)
            }
        }
        _ => ("404 Not Found", TEXT, "not found\n".into(), head_only),
    }
}

/// The rules' series: version in force, reloads, refused reloads, and
/// when the last reload was tried (Unix seconds; 0: never), and how many
/// views are guarded (`SHOW IDGATE VIEWS`).
pub fn rules_metrics(
    out: &mut String,
    version: u64,
    st: &crate::frontend::inforce::RulesStatus,
    guarded_views: u64,
) {
    let unix = |t: std::time::SystemTime| {
        t.duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0)
    };
    for (name, kind, help, value) in [
        (
            "rules_version",
            "gauge",
            "Version of the rules in force (rules.dir: 1 as started, +1 per applied reload; etcd: the published version).",
            version,
        ),
        (
            "rules_reloads_total",
            "counter",
            "Rule reloads applied.",
            st.reloads,
        ),
        (
            "rules_failed_reloads_total",
            "counter",
            "Rule reloads refused (the rules in force stayed).",
            st.failed_reloads,
        ),
        (
            "rules_last_reload_timestamp_seconds",
            "gauge",
            "When a reload was last tried, applied or not (0: never).",
            st.last_attempt.map_or(0, unix),
        ),
        (
            "rules_failed_version",
            "gauge",
            "rules.source = \"etcd\": the published version last refused here (0: none since the last applied one).",
            st.failed_version.unwrap_or(0),
        ),
        (
            "rules_from_cache",
            "gauge",
            "1: the rules idgate started with came from its cache file (etcd was unreachable).",
            u64::from(st.started_from.is_some()),
        ),
        (
            "views_guarded",
            "gauge",
            "Updatable views over rule tables, through which writes of ids are refused (SHOW IDGATE VIEWS).",
            guarded_views,
        ),
    ] {
        let _ = writeln!(out, "# HELP idgate_{name} {help}");
        let _ = writeln!(out, "# TYPE idgate_{name} {kind}");
        let _ = writeln!(out, "idgate_{name} {value}");
    }
}

/// Logins delayed after repeated failures from their address.
fn login_metrics(t: &crate::throttle::LoginThrottle) -> String {
    use std::sync::atomic::Ordering::Relaxed;
    format!(
        "# HELP idgate_login_delays_total Logins delayed after repeated failed logins from their address.\n\
         # TYPE idgate_login_delays_total counter\n\
         idgate_login_delays_total {}\n\
         # HELP idgate_login_delay_seconds_total Time those logins were delayed.\n\
         # TYPE idgate_login_delay_seconds_total counter\n\
         idgate_login_delay_seconds_total {}\n",
        t.delayed.load(Relaxed),
        t.delayed_ms.load(Relaxed) as f64 / 1000.0
    )
}

/// Sessions on each session thread (`server.session_threads`): how
/// evenly the threads are loaded; and how many sessions a thread accepted
/// and handed to a less loaded one (`crate::workers::Workers::place`).
pub fn session_thread_metrics(sessions: &[usize], handed_off: u64) -> String {
    let mut out = String::from(
        "# HELP idgate_session_thread_sessions Client sessions on each session thread (server.session_threads).\n\
         # TYPE idgate_session_thread_sessions gauge\n",
    );
    for (i, n) in sessions.iter().enumerate() {
        let _ = writeln!(out, "idgate_session_thread_sessions{{thread=\"{i}\"}} {n}");
    }
    let _ = write!(
        out,
        "# HELP idgate_session_thread_handoffs_total Sessions a session thread accepted and handed to a less loaded one.\n\
         # TYPE idgate_session_thread_handoffs_total counter\n\
         idgate_session_thread_handoffs_total {handed_off}\n"
    );
    out
}

/// caching_sha2_password logins by path, and public keys sent.
fn sha2_metrics(s: &crate::frontend::session::sha2state::Sha2State) -> String {
    let [fast, full_tls, full_rsa, keys] = s.counts();
    format!(
        "# HELP idgate_sha2_logins_total caching_sha2_password logins accepted, by path.\n\
         # TYPE idgate_sha2_logins_total counter\n\
         idgate_sha2_logins_total{{path=\"fast\"}} {fast}\n\
         idgate_sha2_logins_total{{path=\"full_tls\"}} {full_tls}\n\
         idgate_sha2_logins_total{{path=\"full_rsa\"}} {full_rsa}\n\
         # HELP idgate_sha2_public_keys_total RSA public keys sent to clients.\n\
         # TYPE idgate_sha2_public_keys_total counter\n\
         idgate_sha2_public_keys_total {keys}\n"
    )
}

/// The shard connection pools, per shard (as `SHOW IDGATE POOLS`).
pub fn pool_metrics(pools: &[crate::backend::pool::PoolView]) -> String {
    type Get = fn(&crate::backend::pool::PoolView) -> f64;
    let series: [(&str, &str, &str, Get); 15] = [
        (
            "open",
            "gauge",
            "Shard connections open (idle and in use).",
            |v| v.state.open as f64,
        ),
        (
            "idle",
            "gauge",
            "Shard connections idle in the pool.",
            |v| v.state.idle as f64,
        ),
        (
            "in_use",
            "gauge",
            "Shard connections held by sessions.",
            |v| v.in_use() as f64,
        ),
        (
            "waiting",
            "gauge",
            "Clients waiting for a shard connection (pool_max reached).",
            |v| v.state.waiting as f64,
        ),
        (
            "waits_total",
            "counter",
            "Clients that had to wait for a shard connection.",
            |v| v.waits as f64,
        ),
        (
            "wait_seconds_total",
            "counter",
            "Time clients waited for a shard connection.",
            |v| v.wait_us as f64 / 1e6,
        ),
        (
            "timeouts_total",
            "counter",
            "Clients refused with 1040 after pool_wait_timeout_ms.",
            |v| v.timeouts as f64,
        ),
        (
            "created_total",
            "counter",
            "Shard connections opened (each a MariaDB login).",
            |v| v.created as f64,
        ),
        (
            "closed_total",
            "counter",
            "Shard connections closed.",
            |v| v.closed as f64,
        ),
        (
            "reused_total",
            "counter",
            "Shard connections handed out again without a login.",
            |v| v.reused as f64,
        ),
        (
            "stale_total",
            "counter",
            "Idle shard connections found closed by the shard before use (replaced).",
            |v| v.stale as f64,
        ),
        (
            "multiplexed_total",
            "counter",
            "Shard connections given back after a statement (multiplex).",
            |v| v.multiplexed as f64,
        ),
        (
            "restored_total",
            "counter",
            "Shard connections reset and given their taker's session state (multiplex).",
            |v| v.restored as f64,
        ),
        (
            "lid_reads_total",
            "counter",
            "LAST_INSERT_ID() values read from a shard connection another session left one on (multiplex).",
            |v| v.lid_reads as f64,
        ),
        (
            "moved_total",
            "counter",
            "Shard connections moved to their taker's session thread (session_threads).",
            |v| v.moved as f64,
        ),
    ];
    let mut out = String::new();
    for (name, kind, help, get) in series {
        let _ = writeln!(out, "# HELP idgate_pool_{name} {help}");
        let _ = writeln!(out, "# TYPE idgate_pool_{name} {kind}");
        for v in pools {
            let _ = writeln!(
                out,
                "idgate_pool_{name}{{shard=\"{}\"}} {}",
                label(&v.shard),
                get(v)
            );
        }
    }
    let _ = writeln!(
        out,
        "# HELP idgate_pool_pinned Shard connections held by sessions that cannot give them back after a statement, by reason (multiplex).\n# TYPE idgate_pool_pinned gauge"
    );
    for v in pools {
        for p in crate::frontend::session::mux::Pin::ALL {
            let _ = writeln!(
                out,
                "idgate_pool_pinned{{shard=\"{}\",reason=\"{}\"}} {}",
                label(&v.shard),
                p.name(),
                v.pinned.get(p as usize).copied().unwrap_or(0)
            );
        }
    }
    out
}

/// Resharding: per job document (as last read, every few seconds) its
/// phase (0 plan, 1 copy, 2 catch_up, 3 verify, 4 cutover, 5 cleanup,
/// 6 done, 7 aborted, 8 failed) and rows copied / total; this idgate's
/// pause: statements held now, pauses, time paused, deadline failures.
pub fn reshard_metrics(
    jobs: &[crate::reshard::protocol::Job],
    pause: &crate::frontend::pause::gate::PauseView,
) -> String {
    let mut out = String::new();
    type Get = fn(&crate::reshard::protocol::Job) -> u64;
    let per_job: [(&str, &str, Get); 3] = [
        (
            "phase",
            "Phase of the table's resharding job: 0 plan, 1 copy, 2 catch_up, 3 verify, 4 cutover, 5 cleanup, 6 done, 7 aborted, 8 failed.",
            |j| j.phase as u64,
        ),
        ("rows_copied", "Rows the job has copied.", |j| j.copied()),
        (
            "rows_total",
            "Rows on the source when the copy began.",
            |j| j.rows_total,
        ),
    ];
    for (name, help, get) in per_job {
        let _ = writeln!(out, "# HELP idgate_reshard_{name} {help}");
        let _ = writeln!(out, "# TYPE idgate_reshard_{name} gauge");
        for j in jobs {
            let _ = writeln!(
                out,
                "idgate_reshard_{name}{{table=\"{}\"}} {}",
                label(&j.table),
                get(j)
            );
        }
    }
    for (name, kind, help, value) in [
        (
            "held_statements",
            "gauge",
            "Statements held now by a resharding cutover's pause.",
            pause.held as f64,
        ),
        (
            "pauses_total",
            "counter",
            "Resharding pauses this idgate took part in.",
            pause.pauses as f64,
        ),
        (
            "pause_seconds_total",
            "counter",
            "Time tables were paused here, summed.",
            pause.paused_secs,
        ),
        (
            "deadline_failures_total",
            "counter",
            "Held statements failed with 1205 past a pause's deadline.",
            pause.deadline_failures as f64,
        ),
        (
            "epoch_acked",
            "gauge",
            "The highest pause epoch this idgate acknowledged.",
            pause.acked as f64,
        ),
    ] {
        let _ = writeln!(out, "# HELP idgate_reshard_{name} {help}");
        let _ = writeln!(out, "# TYPE idgate_reshard_{name} {kind}");
        let _ = writeln!(out, "idgate_reshard_{name} {value}");
    }
    out
}

/// The Prometheus text exposition of `stats` and the session count.
pub fn metrics(stats: &[GeneratorStats], sessions: usize, opened: u64) -> String {
    let mut out = String::with_capacity(512 + 160 * stats.len() * 12);
    let _ = writeln!(out, "# HELP idgate_sessions Client sessions open.");
    let _ = writeln!(out, "# TYPE idgate_sessions gauge");
    let _ = writeln!(out, "idgate_sessions {sessions}");
    let _ = writeln!(
        out,
        "# HELP idgate_sessions_opened_total Client sessions that logged in since the start."
    );
    let _ = writeln!(out, "# TYPE idgate_sessions_opened_total counter");
    let _ = writeln!(out, "idgate_sessions_opened_total {opened}");
    type Get = fn(&GeneratorStats) -> f64;
    let series: [(&str, &str, &str, Get); 12] = [
        (
            "next_id",
            "gauge",
            "The next id this process would issue.",
            |g| g.next_id as f64,
        ),
        (
            "high_water",
            "gauge",
            "Sequence: end of the highest segment reserved; snowflake: the persisted ceiling tick.",
            |g| g.high_water as f64,
        ),
        (
            "cached_ids",
            "gauge",
            "Ids this process can issue from memory before it needs the store.",
            |g| g.cached_remaining as f64,
        ),
        (
            "batch",
            "gauge",
            "Sequence: size of the next reservation.",
            |g| g.batch as f64,
        ),
        (
            "rate_per_second",
            "gauge",
            "Sequence: measured consumption in ids per second.",
            |g| g.rate_per_sec,
        ),
        (
            "issued_total",
            "counter",
            "Sequence: ids issued (or skipped) by this process.",
            |g| g.issued as f64,
        ),
        (
            "floor",
            "gauge",
            "Sequence: highest id seen by observe or set_floor.",
            |g| g.floor as f64,
        ),
        (
            "waits_total",
            "counter",
            "Requests that found the cache empty and waited for the store.",
            |g| g.waits as f64,
        ),
        (
            "store_errors_total",
            "counter",
            "Failed store calls.",
            |g| g.store_errors as f64,
        ),
        (
            "store_writes_total",
            "counter",
            "Successful store writes.",
            |g| g.store_writes as f64,
        ),
        (
            "lease_valid",
            "gauge",
            "1 while the generator may issue ids (snowflake: holds a valid node lease).",
            |g| f64::from(u8::from(g.lease_valid)),
        ),
        (
            "clock_skew_ms",
            "gauge",
            "Snowflake: how far this node's clock is behind the cluster high-water while it issues from a logical clock (0: on its own clock).",
            |g| g.clock_skew_ms as f64,
        ),
    ];
    for (name, kind, help, get) in series {
        let _ = writeln!(out, "# HELP idgate_generator_{name} {help}");
        let _ = writeln!(out, "# TYPE idgate_generator_{name} {kind}");
        for g in stats {
            let _ = writeln!(
                out,
                "idgate_generator_{name}{{generator=\"{}\",kind=\"{}\"}} {}",
                label(&g.name),
                kind_name(g.kind),
                get(g)
            );
        }
    }
    let _ = writeln!(
        out,
        "# HELP idgate_generator_node_id Snowflake: the leased node id."
    );
    let _ = writeln!(out, "# TYPE idgate_generator_node_id gauge");
    for g in stats {
        if let Some(n) = g.node_id {
            let _ = writeln!(
                out,
                "idgate_generator_node_id{{generator=\"{}\",kind=\"{}\"}} {n}",
                label(&g.name),
                kind_name(g.kind)
            );
        }
    }
    out
}

fn kind_name(k: GeneratorKind) -> &'static str {
    match k {
        GeneratorKind::Sequence => "sequence",
        GeneratorKind::Snowflake => "snowflake",
    }
}

/// A label value escaped as the text format requires.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(name: &str) -> GeneratorStats {
        GeneratorStats {
            name: name.into(),
            kind: GeneratorKind::Sequence,
            high_water: 2000,
            next_id: 1001,
            cached_remaining: 999,
            batch: 1000,
            rate_per_sec: 12.5,
            issued: 1000,
            floor: 7,
            waits: 1,
            store_errors: 0,
            store_writes: 2,
            node_id: None,
            lease_valid: true,
            last_error: None,
            clock_skew_ms: 0,
        }
    }

    #[test]
    fn session_thread_metrics_per_thread() {
        let m = session_thread_metrics(&[3, 0], 5);
        assert!(
            m.contains("# TYPE idgate_session_thread_sessions gauge\n"),
            "{m}"
        );
        assert!(
            m.contains("idgate_session_thread_sessions{thread=\"0\"} 3\n"),
            "{m}"
        );
        assert!(
            m.contains("idgate_session_thread_sessions{thread=\"1\"} 0\n"),
            "{m}"
        );
        assert!(
            m.contains("idgate_session_thread_handoffs_total 5\n"),
            "{m}"
        );
    }

    #[test]
    fn pool_metrics_per_shard() {
        let v = crate::backend::pool::PoolView {
            shard: "s\"0".into(),
            max: 4,
            state: crate::backend::pool::PoolState {
                open: 3,
                idle: 1,
                waiting: 2,
            },
            wait_us: 1_500_000,
            reused: 9,
            lid_reads: 4,
            ..Default::default()
        };
        let m = pool_metrics(&[v]);
        assert!(
            m.contains("idgate_pool_in_use{shard=\"s\\\"0\"} 2\n"),
            "{m}"
        );
        assert!(
            m.contains("idgate_pool_waiting{shard=\"s\\\"0\"} 2\n"),
            "{m}"
        );
        assert!(
            m.contains("idgate_pool_wait_seconds_total{shard=\"s\\\"0\"} 1.5\n"),
            "{m}"
        );
        assert!(
            m.contains("idgate_pool_reused_total{shard=\"s\\\"0\"} 9\n"),
            "{m}"
        );
        assert!(
            m.contains("idgate_pool_lid_reads_total{shard=\"s\\\"0\"} 4\n"),
            "{m}"
        );
        assert!(m.contains("# TYPE idgate_pool_open gauge\n"), "{m}");
        assert!(
            m.contains("idgate_pool_pinned{shard=\"s\\\"0\",reason=\"transaction\"} 0\n"),
            "{m}"
        );
    }

    #[test]
    fn rules_series() {
        let st = crate::frontend::inforce::LiveRules::new(None).status();
        let mut m = String::new();
        rules_metrics(&mut m, 4, &st, 2);
        for line in [
            "idgate_rules_version 4\n",
            "idgate_rules_reloads_total 0\n",
            "# TYPE idgate_views_guarded gauge\n",
            "idgate_views_guarded 2\n",
        ] {
            assert!(m.contains(line), "{line} in {m}");
        }
    }

    #[test]
    fn metrics_text() {
        let m = metrics(&[stats("orders"), stats("we\"ird")], 3, 17);
        assert!(m.contains("idgate_sessions 3\n"), "{m}");
        assert!(m.contains("idgate_sessions_opened_total 17\n"), "{m}");
        assert!(
            m.contains("idgate_generator_next_id{generator=\"orders\",kind=\"sequence\"} 1001\n"),
            "{m}"
        );
        assert!(
            m.contains("# TYPE idgate_generator_issued_total counter\n"),
            "{m}"
        );
        assert!(m.contains("generator=\"we\\\"ird\""), "{m}");
        assert!(m.contains(
            "idgate_generator_rate_per_second{generator=\"orders\",kind=\"sequence\"} 12.5\n"
        ));
        // Every sample line: name{labels} value.
        for l in m.lines().filter(|l| !l.starts_with('#')) {
            let v = l.rsplit(' ').next().unwrap();
            assert!(v.parse::<f64>().is_ok(), "{l}");
        }
    }
}

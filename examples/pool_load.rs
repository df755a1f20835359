//! Load for the shard connection pool (`scripts/bench-pool.sh`): N clients
//! at once, each K times: connect, a few statements, disconnect. Prints one
//! line of counts, connect latencies (how long a client waited for its
//! login, which includes waiting for a pooled shard connection) and the
//! latencies of each session's slowest statement (with multiplexing the
//! wait for a pooled connection comes with each statement instead), and
//! exits 1 if any client got an error.
//!
//!   cargo run --example pool_load -- ADDR USER PASSWORD CLIENTS ITERATIONS

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, OptsBuilder};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [addr, user, password, clients, iterations] = &args[..] else {
        eprintln!("usage: pool_load ADDR USER PASSWORD CLIENTS ITERATIONS");
        std::process::exit(2);
    };
    let (host, port) = addr.rsplit_once(':').unwrap_or((addr, "3306"));
    let opts = OptsBuilder::default()
        .ip_or_hostname(host.to_string())
        .tcp_port(port.parse().unwrap_or(3306))
        .user(Some(user.clone()))
        .pass(Some(password.clone()))
        .prefer_socket(false)
        .wait_timeout(None);
    let clients: usize = clients.parse().unwrap_or(1);
    let iterations: usize = iterations.parse().unwrap_or(1);
    // Every client starts at once.
    let start = Arc::new(tokio::sync::Barrier::new(clients));
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let (opts, start) = (opts.clone(), start.clone());
            tokio::spawn(async move {
                start.wait().await;
                let mut waits = Vec::with_capacity(iterations);
                let mut slowest = Vec::with_capacity(iterations);
                let mut errors: BTreeMap<String, usize> = BTreeMap::new();
                for _ in 0..iterations {
                    let t = Instant::now();
                    let r = async {
                        let mut c = Conn::new(opts.clone()).await?;
                        let waited = t.elapsed();
                        let s = Instant::now();
                        c.query_drop("SELECT 1").await?;
                        let mut slow = s.elapsed();
                        let s = Instant::now();
                        let _: Option<u64> = c.query_first("SELECT CONNECTION_ID()").await?;
                        slow = slow.max(s.elapsed());
                        let s = Instant::now();
                        c.query_drop("DO 1").await?;
                        slow = slow.max(s.elapsed());
                        c.disconnect().await?;
                        Ok::<(Duration, Duration), mysql_async::Error>((waited, slow))
                    }
                    .await;
                    match r {
                        Ok((w, s)) => {
                            waits.push(w);
                            slowest.push(s);
                        }
                        Err(mysql_async::Error::Server(e)) => {
                            *errors.entry(format!("{}", e.code)).or_default() += 1
                        }
                        Err(e) => {
                            let kind = format!("{e}");
                            let kind = kind.split(':').next().unwrap_or("").to_string();
                            *errors.entry(kind).or_default() += 1
                        }
                    }
                }
                (waits, slowest, errors)
            })
        })
        .collect();
    let mut waits = Vec::new();
    let mut slowest = Vec::new();
    let mut errors: BTreeMap<String, usize> = BTreeMap::new();
    for t in tasks {
        match t.await {
            Ok((w, s, e)) => {
                waits.extend(w);
                slowest.extend(s);
                for (k, n) in e {
                    *errors.entry(k).or_default() += n;
                }
            }
            Err(e) => *errors.entry(format!("task: {e}")).or_default() += 1,
        }
    }
    let secs = started.elapsed().as_secs_f64();
    waits.sort();
    slowest.sort();
    let pct = |v: &[Duration], p: f64| {
        v.get(((v.len() as f64 * p) as usize).min(v.len().saturating_sub(1)))
            .map(|d| d.as_millis())
            .unwrap_or(0)
    };
    let total_errors: usize = errors.values().sum();
    println!(
        "clients {clients} iterations {iterations} sessions_ok {} errors {total_errors} {errors:?} \
         seconds {secs:.1} sessions_per_s {:.0} connect_ms p50 {} p99 {} max {} \
         slowest_statement_ms p50 {} p99 {} max {}",
        waits.len(),
        waits.len() as f64 / secs,
        pct(&waits, 0.5),
        pct(&waits, 0.99),
        pct(&waits, 1.0),
        pct(&slowest, 0.5),
        pct(&slowest, 0.99),
        pct(&slowest, 1.0),
    );
    if total_errors > 0 {
        std::process::exit(1);
    }
}

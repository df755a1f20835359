//! Snowflake ids stay k-ordered across restarts and nodes (issue 16, part
//! 5), with real processes on the test bed's etcd: the measured case. An
//! idgate process issues snowflake ids (over RESP), is killed with -9, and
//! is started again under libfaketime (Debian `faketime`) with its clock an
//! hour behind. It leases a new node id (the old lease is still alive in
//! etcd), and every id it issues is above every id issued before, by either
//! of two processes; it reports the skew on /metrics and /healthz.
//!
//! Under `CI=true` a missing server or tool fails the test.

mod support;

use support::process::{tool, Idgate, Options, Raw};

const RULES: &str = r#"
[[generator]]
name = "events"
kind = "snowflake"
"#;

fn next(c: &mut Raw, n: usize) -> Vec<u64> {
    c.send(format!("IDGATE.NEXT events {n}\r\n").as_bytes());
    let head = c.line();
    assert_eq!(head, format!("*{n}"), "array reply");
    (0..n)
        .map(|_| {
            let l = c.line();
            l[1..].parse().unwrap_or_else(|_| panic!("{l}"))
        })
        .collect()
}

fn login(p: &Idgate) -> Raw {
    let mut c = Raw::connect(p.resp);
    assert_eq!(c.cmd("AUTH app secret"), "+OK");
    c
}

#[test]
fn kill9_and_restart_an_hour_behind_stays_above_every_earlier_id() {
    let Some(tb) = support::testbed() else { return };
    let Some(faketime) = tool("faketime", &["-f", "-1h", "true"]) else {
        return;
    };
    let opts = Options {
        rules: RULES.into(),
        etcd_prefix: format!("/{}", support::unique("skew")),
        ..Options::default()
    };
    // Two processes issue ids; one of them will be killed.
    let mut a = Idgate::start(&tb, &opts);
    let b = Idgate::start(&tb, &opts);
    let (mut ca, mut cb) = (login(&a), login(&b));
    let mut before = Vec::new();
    for _ in 0..20 {
        before.extend(next(&mut ca, 50));
        before.extend(next(&mut cb, 50));
    }
    let max_before = *before.iter().max().unwrap();
    a.kill9();
    // Restarted with the clock an hour behind (monotonic time untouched).
    let mut skewed = opts.clone();
    skewed.wrapper = vec![faketime.display().to_string(), "-f".into(), "-1h".into()];
    skewed.env = vec![("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into())];
    let a2 = Idgate::start(&tb, &skewed);
    let mut c2 = login(&a2);
    let after = next(&mut c2, 500);
    assert!(
        after.iter().all(|&id| id > max_before),
        "an id after the restart is below one issued before: {} <= {max_before}",
        after.iter().min().unwrap()
    );
    assert!(after.windows(2).all(|w| w[0] < w[1]));
    // The skew is reported (about an hour).
    let metrics = a2.http_get("/metrics");
    let line = metrics
        .lines()
        .find(|l| l.starts_with("idgate_generator_clock_skew_ms{generator=\"events\""))
        .unwrap_or_else(|| panic!("no skew metric:\n{metrics}"));
    let skew: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(skew > 3_000_000.0, "{line}");
    let health = a2.http_get("/healthz");
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    assert!(health.contains("behind the cluster high-water"), "{health}");
    assert!(a2.log().contains("logical clock"), "{}", a2.log());
    // The other process keeps issuing; neither repeats an id.
    let more_b = next(&mut cb, 200);
    let mut all: Vec<u64> = before
        .iter()
        .chain(&after)
        .chain(&more_b)
        .copied()
        .collect();
    let n = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), n, "an id was issued twice");
}

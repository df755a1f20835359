//! A daily formatted sequence across midnight, with real processes on the
//! test bed's etcd and libfaketime (Debian `faketime`) starting their
//! clocks at 23:59:58 (issue 16, part 2). Two idgate processes hand out
//! ids over RESP while their clocks cross midnight (the second started
//! later, so its clock lags): the counter restarts at 1 on the new day,
//! and once either process issued an id of the new day, neither issues
//! one of the old day again.
//!
//! Under `CI=true` a missing server or tool fails the test.

mod support;

use std::time::{Duration, Instant};
use support::process::{tool, Idgate, Options, Raw};

const RULES: &str = r#"
[[generator]]
name = "orders"
kind = "sequence"
format = "{prefix:2}{yyyyMMdd}{seq:8}"
prefix = 17
timezone = "+08:00"
batch = 50
"#;

fn incr(c: &mut Raw) -> u64 {
    let r = c.cmd("INCR orders");
    r.strip_prefix(':')
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("INCR: {r}"))
}

#[test]
fn two_processes_cross_midnight() {
    let Some(tb) = support::testbed() else { return };
    let Some(faketime) = tool("faketime", &["-f", "@2026-11-24 23:59:58", "true"]) else {
        return;
    };
    let opts = Options {
        rules: RULES.into(),
        etcd_prefix: format!("/{}", support::unique("daily")),
        // 23:59:58 in +08:00 is 15:59:58 UTC; libfaketime reads TZ.
        wrapper: vec![
            faketime.display().to_string(),
            "-f".into(),
            "@2026-11-24 15:59:58".into(),
        ],
        env: vec![
            ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
            ("TZ".into(), "UTC".into()),
        ],
        ..Options::default()
    };
    let a = Idgate::start(&tb, &opts);
    let b = Idgate::start(&tb, &opts);
    let mut c = [Raw::connect(a.resp), Raw::connect(b.resp)];
    for x in &mut c {
        assert_eq!(x.cmd("AUTH app secret"), "+OK");
    }
    let day = |id: u64| id / 100_000_000;
    let (d24, d25) = (1720261124, 1720261125);
    let mut seen: Vec<u64> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(300);
    // Until both processes issued in the new day.
    let mut new_day = [false, false];
    while !(new_day[0] && new_day[1]) {
        for (i, x) in c.iter_mut().enumerate() {
            let id = incr(x);
            if seen.iter().any(|&s| day(s) == d25) {
                assert_eq!(
                    day(id),
                    d25,
                    "process {i} issued {id} after the new day began"
                );
            }
            assert!(day(id) == d24 || day(id) == d25, "{id}");
            new_day[i] |= day(id) == d25;
            seen.push(id);
        }
        assert!(
            Instant::now() < deadline,
            "the fake clocks never reached midnight"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let first_new = seen
        .iter()
        .copied()
        .filter(|&s| day(s) == d25)
        .min()
        .unwrap();
    assert_eq!(first_new, 172026112500000001, "the counter restarts at 1");
    assert!(seen.iter().filter(|&&s| day(s) == d24).count() > 0);
    let n = seen.len();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len(), n, "an id was issued twice");
}

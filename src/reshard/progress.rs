//! What `idgate reshard` shows while it runs: on a terminal, one bar
//! redrawn in place (rows copied / total, rate, ETA, phase); otherwise
//! plain lines, one every few seconds and one per phase change, for logs.

use std::io::Write;
use std::time::{Duration, Instant};

use super::protocol::Job;

/// The progress display.
pub struct Progress {
    tty: bool,
    last: Option<Instant>,
    out: Box<dyn Write + Send>,
}

/// The text of one progress report of `job`: the bar form for a terminal,
/// else a plain line.
pub fn line(job: &Job, tty: bool) -> String {
    let copied = job.copied();
    let total = job.rows_total.max(copied);
    let pct = (copied * 100).checked_div(total).unwrap_or(100);
    let eta = if job.rate > 0 && total > copied {
        format!("{} s", (total - copied) / job.rate)
    } else {
        "-".into()
    };
    let detail = format!(
        "{copied}/{total} rows ({pct}%), {} rows/s, ETA {eta}, re-copied {}, verified ranges {}",
        job.rate, job.caught_up, job.verified_chunks
    );
    if tty {
        let width = 30usize;
        let filled = (pct as usize).min(100) * width / 100;
        format!(
            "\r{} [{}{}] {detail} {:<9}",
            job.table,
            "#".repeat(filled),
            ".".repeat(width - filled),
            job.phase.name()
        )
    } else {
        format!("reshard {}: {}: {detail}", job.table, job.phase.name())
    }
}

impl Progress {
    /// To stderr, as a bar when it is a terminal.
    pub fn stderr() -> Progress {
        Progress {
            tty: std::io::IsTerminal::is_terminal(&std::io::stderr()),
            last: None,
            out: Box::new(std::io::stderr()),
        }
    }

    fn every(&self) -> Duration {
        if self.tty {
            Duration::from_millis(200)
        } else {
            Duration::from_secs(5)
        }
    }

    fn print(&mut self, job: &Job) {
        let text = line(job, self.tty);
        if self.tty {
            let _ = write!(self.out, "{text}");
        } else {
            let _ = writeln!(self.out, "{text}");
        }
        let _ = self.out.flush();
        self.last = Some(Instant::now());
    }

    /// A progress report, if the last one is old enough.
    pub fn update(&mut self, job: &Job) {
        if self.last.is_none_or(|t| t.elapsed() >= self.every()) {
            self.print(job);
        }
    }

    /// A phase change: always shown.
    pub fn phase(&mut self, job: &Job) {
        self.print(job);
        if self.tty {
            let _ = writeln!(self.out);
        }
    }

    /// A message of its own line.
    pub fn note(&mut self, msg: &str) {
        let _ = writeln!(self.out, "{}{msg}", if self.tty { "\n" } else { "" });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reshard::protocol::{Phase, Placement, SourceProgress};

    #[test]
    fn lines_show_rows_rate_eta_and_phase() {
        let p = Placement {
            shards: vec!["s0".into()],
            sharding: None,
            shard_key: None,
        };
        let job = Job {
            table: "shop.orders".into(),
            id: "j".into(),
            from: p.clone(),
            to: p,
            phase: Phase::Copy,
            rules_version: 1,
            published_version: None,
            swapped: vec![],
            rows_total: 1000,
            sources: vec![SourceProgress {
                shard: "s0".into(),
                last_key: vec![],
                end_key: vec![],
                copied: 250,
                done: false,
            }],
            caught_up: 3,
            verified_chunks: 0,
            rate: 50,
            max_rows_per_second: 100,
            started_ms: 0,
            updated_ms: 0,
            error: None,
        };
        assert_eq!(
            line(&job, false),
            "reshard shop.orders: copy: 250/1000 rows (25%), 50 rows/s, ETA 15 s, re-copied 3, verified ranges 0"
        );
        let bar = line(&job, true);
        assert!(
            bar.starts_with("\rshop.orders [#######......................."),
            "{bar}"
        );
        assert!(bar.ends_with("copy     "), "{bar}");
    }
}

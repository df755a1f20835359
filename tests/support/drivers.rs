//! Real drivers run as programs (Node, PHP) against both sides of a
//! comparison: an AUTO_INCREMENT table on shard s0 directly, and a rule
//! table through idgate. Each program takes `HOST PORT USER PASSWORD
//! DATABASE` and prints one line of JSON.

use super::proxy::{self, Proxy};
use super::Testbed;
use serde_json::Value;
use std::process::Command;

/// The two sides: `schema.t` (`id BIGINT PRIMARY KEY, k VARCHAR(32) NOT
/// NULL UNIQUE`) with a sequence rule on its id behind `proxy`, and
/// `reference.t`, the same table with AUTO_INCREMENT, on s0.
pub struct Sides {
    pub schema: String,
    pub reference: String,
    pub proxy: Proxy,
}

impl Sides {
    /// Creates both tables (schema names start with `tag`) and starts idgate.
    pub async fn new(tb: &Testbed, tag: &str) -> Sides {
        let schema = super::unique(tag);
        let reference = format!("{schema}_ai");
        proxy::admin(
            tb,
            0,
            &[
                &format!("CREATE DATABASE `{schema}`"),
                &format!("CREATE DATABASE `{reference}`"),
                &format!(
                    "CREATE TABLE `{schema}`.t (id BIGINT PRIMARY KEY, k VARCHAR(32) NOT NULL UNIQUE)"
                ),
                &format!(
                    "CREATE TABLE `{reference}`.t (id BIGINT AUTO_INCREMENT PRIMARY KEY, k VARCHAR(32) NOT NULL UNIQUE)"
                ),
            ],
        )
        .await;
        let rules = format!(
            "[[generator]]\nname = \"ids\"\nkind = \"sequence\"\nbatch = 20\n\n\
             [[table]]\nname = \"{schema}.t\"\ncolumn = \"id\"\ngenerator = \"ids\"\n"
        );
        let proxy = Proxy::start_rules(tb, &rules, &format!("/{tag}-{schema}")).await;
        Sides {
            schema,
            reference,
            proxy,
        }
    }

    /// Runs `program script` directly against s0 and then through idgate:
    /// the two JSON outputs (directly, through idgate).
    pub async fn run(&self, tb: &Testbed, program: &str, script: &str) -> (Value, Value) {
        let (host, port) = tb.shards[0].rsplit_once(':').expect("host:port");
        let direct = run_json(
            program,
            script,
            [host, port, &tb.user, &tb.password, &self.reference],
        )
        .await;
        let port = self.proxy.addr.port().to_string();
        let through = run_json(
            program,
            script,
            [
                "127.0.0.1",
                &port,
                proxy::USER,
                proxy::PASSWORD,
                &self.schema,
            ],
        )
        .await;
        eprintln!("directly: {direct}\nthrough idgate: {through}");
        (direct, through)
    }
}

impl Sides {
    /// Stops idgate and drops both schemas.
    pub async fn finish(self, tb: &Testbed) {
        self.proxy.stop().await;
        for db in [&self.schema, &self.reference] {
            proxy::admin(tb, 0, &[&format!("DROP DATABASE IF EXISTS `{db}`")]).await;
        }
    }
}

/// Runs `program script args...`; its output, one line of JSON. A failing
/// program fails the test with its output.
pub async fn run_json(program: &str, script: &str, args: [&str; 5]) -> Value {
    let mut cmd = Command::new(program);
    cmd.arg(script).args(args);
    let out = tokio::task::spawn_blocking(move || cmd.output())
        .await
        .expect("join")
        .unwrap_or_else(|e| panic!("run {program} {script}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{program} {script} failed:\n{stdout}\n{stderr}"
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

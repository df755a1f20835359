//! The `idgate` command line.

use clap::{Parser, Subcommand};
use idgate::config::Config;
use idgate::frontend::Shared;
use idgate::idgen::Allocator;
use idgate::rules::RuleSet;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use tracing::{error, info, warn};

#[derive(Parser)]
#[command(
    name = "idgate",
    version,
    about = "MySQL proxy that fills id columns with globally unique ids"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the proxy.
    Serve {
        /// Path of idgate.toml.
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Check a config file (and its rules directory) without starting anything.
    Check {
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Print the `password_hash` of a password (`*` + 40 hex digits, as
    /// MariaDB's `SELECT PASSWORD('...')`; or `$idgate-sha2$...`, salted
    /// PBKDF2-SHA256, with `--plugin caching_sha2_password`), read from
    /// stdin, or from a prompt without echo on a terminal.
    HashPassword {
        /// `mysql_native_password` (default) or `caching_sha2_password`.
        #[arg(long, default_value = "mysql_native_password")]
        plugin: String,
    },
    /// Work with rule files.
    Rules {
        #[command(subcommand)]
        command: RulesCommand,
    },
}

#[derive(Subcommand)]
enum RulesCommand {
    /// Validate every *.toml in DIR like `serve` does; exits non-zero on errors.
    Check {
        /// The rules directory.
        dir: PathBuf,
        /// idgate.toml whose [[shards]] names the rules may use; without it,
        /// shard names are not checked (the output says so).
        #[arg(long, short)]
        config: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("IDGATE_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Check { config } => match Config::load(&config) {
            Ok(cfg) => {
                println!("{}: ok", config.display());
                match &cfg.rules {
                    Some(r) => check_rules(&r.dir, Some(&shard_names(&cfg))),
                    None => ExitCode::SUCCESS,
                }
            }
            Err(e) => {
                eprintln!("{e}");
                ExitCode::FAILURE
            }
        },
        Command::HashPassword { plugin } => match read_password() {
            _ if plugin != "mysql_native_password" && plugin != "caching_sha2_password" => {
                eprintln!(
                    "--plugin {plugin:?}: use mysql_native_password or caching_sha2_password"
                );
                ExitCode::FAILURE
            }
            Ok(pw) if pw.is_empty() => {
                eprintln!("empty password: an account without a password needs no password_hash");
                ExitCode::FAILURE
            }
            Ok(pw) if plugin == "caching_sha2_password" => {
                let hash = idgate::protocol::sha2::Sha2Hash::new(pw.as_bytes());
                println!("{}", hash.to_text());
                ExitCode::SUCCESS
            }
            Ok(pw) => {
                println!("{}", idgate::config::native_hash_text(pw.as_bytes()));
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("cannot read the password: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Rules {
            command: RulesCommand::Check { dir, config },
        } => match config.as_deref().map(Config::load).transpose() {
            Ok(cfg) => check_rules(&dir, cfg.as_ref().map(shard_names).as_deref()),
            Err(e) => {
                eprintln!("{e}");
                ExitCode::FAILURE
            }
        },
        Command::Serve { config } => {
            let cfg = match Config::load(&config) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("{e}");
                    return ExitCode::FAILURE;
                }
            };
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            if cfg.server.worker_threads > 0 {
                builder.worker_threads(cfg.server.worker_threads);
            }
            let rt = match builder.enable_all().build() {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("cannot start the runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            rt.block_on(serve(cfg))
        }
    }
}

/// One line from stdin (its line end stripped); on a terminal, after a
/// prompt on stderr and with echo off.
fn read_password() -> std::io::Result<String> {
    use std::io::{BufRead, IsTerminal};
    let stdin = std::io::stdin();
    let mut line = String::new();
    if stdin.is_terminal() {
        eprint!("Password: ");
        // SAFETY: tcgetattr/tcsetattr on fd 0 with a termios they fill in.
        let saved = unsafe {
            let mut t: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(0, &mut t) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let saved = t;
            t.c_lflag &= !libc::ECHO;
            libc::tcsetattr(0, libc::TCSANOW, &t);
            saved
        };
        let r = stdin.lock().read_line(&mut line);
        // SAFETY: restores the settings read above.
        unsafe {
            libc::tcsetattr(0, libc::TCSANOW, &saved);
        }
        eprintln!();
        r?;
    } else {
        stdin.lock().read_line(&mut line)?;
    }
    let pw = line.strip_suffix('\n').unwrap_or(&line);
    Ok(pw.strip_suffix('\r').unwrap_or(pw).to_string())
}

/// The config's shard names, in order: what rule files may name.
fn shard_names(cfg: &Config) -> Vec<String> {
    cfg.shards.iter().map(|s| s.name.clone()).collect()
}

fn check_rules(dir: &std::path::Path, shards: Option<&[String]>) -> ExitCode {
    let mut out = std::io::stdout();
    match idgate::rules::check_dir(dir, shards, &idgate::idgen::validate, &mut out) {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(cfg: Config) -> ExitCode {
    let addr = match cfg.listen_addr() {
        Ok(a) => a,
        Err(e) => {
            error!("server.listen: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (rules, allocator) = match &cfg.rules {
        None => (None, None),
        Some(r) => {
            let rules =
                match RuleSet::load_dir(&r.dir, &shard_names(&cfg), &idgate::idgen::validate) {
                    Ok(set) => set,
                    Err(e) => {
                        error!("rules refused:\n{e}");
                        return ExitCode::FAILURE;
                    }
                };
            let allocator = match Allocator::open(&cfg.allocator, rules.generators()).await {
                Ok(a) => a,
                Err(e) => {
                    error!("cannot open the id allocator: {e}");
                    return ExitCode::FAILURE;
                }
            };
            info!(
                generators = rules.generators().len(),
                tables = rules.tables().len(),
                dir = %r.dir.display(),
                "rules loaded"
            );
            (Some(Arc::new(rules)), Some(allocator))
        }
    };
    let shared = Arc::new(Shared::with_rules(cfg, rules, allocator.clone()));
    if let Err(e) = shared.probe_default_shard().await {
        warn!("{e}; serving anyway with a default version string until a shard answers");
    }
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) => {
            error!("cannot listen on {addr}: {e}");
            return ExitCode::FAILURE;
        }
    };
    info!(%addr, "idgate listening");
    // The admin HTTP listener (/metrics, /healthz), as long as the server.
    let _admin = match &shared.config.server.admin_listen {
        Some(a) => match tokio::net::TcpListener::bind(a.as_str()).await {
            Ok(l) => {
                info!(addr = %a, "admin HTTP listening");
                Some(tokio::spawn(idgate::http::serve(l, shared.clone())))
            }
            Err(e) => {
                error!("cannot listen on {a} (server.admin_listen): {e}");
                return ExitCode::FAILURE;
            }
        },
        None => None,
    };
    // SIGHUP: the rules directory is read again and applied, all or
    // nothing (the outcome is logged; `frontend::live`).
    {
        let shared = shared.clone();
        tokio::spawn(async move { reload_on_hangup(shared).await });
    }
    // One shutdown signal for both listeners.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown_signal().await;
        let _ = stop_tx.send(true);
    });
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    // The Redis-protocol id service, as long as the server.
    let resp = match shared.config.resp_addr() {
        Ok(Some(a)) => match tokio::net::TcpListener::bind(a).await {
            Ok(l) => {
                info!(addr = %a, "Redis-protocol id service listening");
                let service = Arc::new(idgate::resp::Service::new(
                    &shared.config,
                    allocator.clone(),
                    shared.login_throttle.clone(),
                ));
                Some(tokio::spawn(idgate::resp::server::run(
                    l,
                    service,
                    stopped(stop_rx.clone()),
                )))
            }
            Err(e) => {
                error!("cannot listen on {a} (server.resp_listen): {e}");
                return ExitCode::FAILURE;
            }
        },
        Ok(None) => None,
        Err(e) => {
            error!("server.resp_listen: {e}");
            return ExitCode::FAILURE;
        }
    };
    idgate::server::run(listener, shared, stopped(stop_rx)).await;
    if let Some(r) = resp {
        let _ = r.await;
    }
    if let Some(a) = allocator {
        // Gives snowflake node ids back; sequences' unused ids become a gap.
        a.shutdown().await;
    }
    ExitCode::SUCCESS
}

async fn reload_on_hangup(shared: Arc<idgate::frontend::Shared>) {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hup = match signal(SignalKind::hangup()) {
        Ok(s) => s,
        Err(e) => {
            error!("cannot install the SIGHUP handler (rule reloads): {e}");
            return;
        }
    };
    while hup.recv().await.is_some() {
        info!("SIGHUP received: reloading the rules");
        // Logged by reload_rules, applied or refused.
        let _ = shared.reload_rules().await;
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            error!("cannot install the SIGTERM handler: {e}");
            return std::future::pending().await;
        }
    };
    tokio::select! {
        _ = term.recv() => info!("SIGTERM received"),
        _ = tokio::signal::ctrl_c() => info!("SIGINT received"),
    }
}

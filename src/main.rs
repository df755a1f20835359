//! The `idgate` command line.

use clap::{Parser, Subcommand};
use idgate::config::{Config, RulesSource};
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
    /// Move a rule table's rows onto other shards while applications keep
    /// writing (copy, catch-up, verify, cutover through a new rules
    /// version); resumes a move in progress; exits 0 once the new
    /// placement serves.
    Reshard(ReshardArgs),
}

#[derive(clap::Args)]
struct ReshardArgs {
    #[arg(long, short)]
    config: PathBuf,
    /// The table, as its rule names it: schema.table.
    #[arg(long)]
    table: String,
    /// The shards it moves onto, in rule order (comma-separated).
    #[arg(long, value_delimiter = ',', required = true)]
    shards: Vec<String>,
    /// `mod` (default) or `hash`.
    #[arg(long)]
    sharding: Option<String>,
    /// The column rows are placed by (default: the id column).
    #[arg(long)]
    shard_key: Option<String>,
    /// Copy rate limit (0: none).
    #[arg(long, default_value_t = idgate::reshard::throttle::DEFAULT_MAX_ROWS_PER_SECOND)]
    max_rows_per_second: u64,
    /// Give up the move in progress (before its swap): drops what it wrote.
    #[arg(long)]
    abort: bool,
    /// Copy, catch up and verify, then stop before the cutover (a later
    /// run without it cuts over).
    #[arg(long)]
    no_cutover: bool,
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
        /// Also check DIR as a change of the rules in force (the published
        /// version with rules.source = "etcd", else rules.dir), with the
        /// checks of a reload that read the store (needs --config).
        #[arg(long)]
        against_store: bool,
    },
    /// Validate DIR (as `check --against-store`) and publish it in etcd as
    /// the next rules version; idgates with rules.source = "etcd" apply it.
    Push {
        /// The rules directory.
        dir: PathBuf,
        #[arg(long, short)]
        config: PathBuf,
    },
    /// List the published rules versions: number, time, who, what changed.
    History {
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Print the files of published version VERSION.
    Show {
        version: u64,
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Publish the files of version VERSION again, as the next version
    /// (checked as a push).
    Rollback {
        version: u64,
        #[arg(long, short)]
        config: PathBuf,
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
                    Some(r) if r.source == RulesSource::Etcd => {
                        println!(
                            "rules: published in etcd (see `idgate rules history --config {}`)",
                            config.display()
                        );
                        ExitCode::SUCCESS
                    }
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
        Command::Rules { command } => rules_command(command),
        Command::Reshard(a) => reshard_command(a),
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

/// `idgate rules ...`.
fn rules_command(command: RulesCommand) -> ExitCode {
    use idgate::publish::cli::{self, Op};
    let (config, op) = match command {
        RulesCommand::Check {
            dir,
            config,
            against_store: false,
        } => {
            return match config.as_deref().map(Config::load).transpose() {
                Ok(cfg) => check_rules(&dir, cfg.as_ref().map(shard_names).as_deref()),
                Err(e) => {
                    eprintln!("{e}");
                    ExitCode::FAILURE
                }
            };
        }
        RulesCommand::Check {
            config: None,
            against_store: true,
            ..
        } => {
            eprintln!("--against-store needs --config (the store and the rules in force are the config's)");
            return ExitCode::FAILURE;
        }
        RulesCommand::Check {
            dir,
            config: Some(config),
            against_store: true,
        } => (config, Op::Check(dir)),
        RulesCommand::Push { dir, config } => (config, Op::Push(dir)),
        RulesCommand::History { config } => (config, Op::History),
        RulesCommand::Show { version, config } => (config, Op::Show(version)),
        RulesCommand::Rollback { version, config } => (config, Op::Rollback(version)),
    };
    let cfg = match Config::load(&config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    let who = idgate::publish::Who {
        user: os_user(),
        host: host_name(),
    };
    let mut out = std::io::stdout();
    match rt.block_on(cli::run(&cfg, op, &who, &mut out)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

/// `idgate reshard ...`.
fn reshard_command(a: ReshardArgs) -> ExitCode {
    let cfg = match Config::load(&a.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    let args = idgate::reshard::mover::Args {
        table: a.table,
        shards: a.shards,
        sharding: a.sharding,
        shard_key: a.shard_key,
        max_rows_per_second: a.max_rows_per_second,
        abort: a.abort,
        no_cutover: a.no_cutover,
        who: idgate::publish::Who {
            user: os_user(),
            host: host_name(),
        },
    };
    let mut progress = idgate::reshard::progress::Progress::stderr();
    match rt.block_on(idgate::reshard::mover::run(&cfg, &args, &mut progress)) {
        Ok(msg) => {
            println!("{msg}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("idgate reshard: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The OS user running the command (`USER`, `LOGNAME`, else the name of
/// the uid in the password database, else the uid).
fn os_user() -> String {
    if let Some(u) = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .ok()
        .filter(|u| !u.is_empty())
    {
        return u;
    }
    // SAFETY: getuid(2) has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    let mut buf = vec![0 as libc::c_char; 4096];
    // SAFETY: an all-zero passwd is a valid value to be overwritten.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call, `buf.len()` is the
    // buffer's size; on success `found` points at `pwd`, whose strings
    // live in `buf`, read before `buf` is dropped.
    let r = unsafe { libc::getpwuid_r(uid, &mut pwd, buf.as_mut_ptr(), buf.len(), &mut found) };
    if r == 0 && !found.is_null() && !pwd.pw_name.is_null() {
        // SAFETY: getpwuid_r wrote a NUL-terminated name into `buf`.
        let name = unsafe { std::ffi::CStr::from_ptr(pwd.pw_name) };
        return name.to_string_lossy().into_owned();
    }
    format!("uid {uid}")
}

/// This machine's host name (`gethostname(2)`).
fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at
    // most that many bytes.
    let r = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if r != 0 {
        return "unknown".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// A runtime for the commands that talk to the store.
fn runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("cannot start the runtime: {e}");
            ExitCode::FAILURE
        })
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
    // With rules.source = "etcd": where the rules came from (logged below).
    let mut published = None;
    let (rules, allocator) = match &cfg.rules {
        None => (None, None),
        Some(r) if r.source == RulesSource::Etcd => match start_published(&cfg, r).await {
            Ok((rules, allocator, initial)) => {
                published = Some(initial);
                (Some(Arc::new(rules)), Some(allocator))
            }
            Err(e) => {
                error!("{e}");
                return ExitCode::FAILURE;
            }
        },
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
    if let Some(initial) = published {
        shared
            .rules
            .start_at(initial.version, initial.from_cache.clone());
        if initial.from_cache.is_none() {
            if let Some(b) = initial.bundle {
                shared.write_cache(b).await;
            }
        } else {
            // Its generators start once etcd answers.
            idgate::frontend::follow::start_pending(shared.clone());
        }
        // Every new version is applied as it is published.
        idgate::frontend::follow::follow(shared.clone());
    }
    if let Err(e) = shared.probe_default_shard().await {
        warn!("{e}; serving anyway with a default version string until a shard answers");
    }
    let listener = match idgate::listener::bind(addr, shared.config.server.max_connections) {
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
        Ok(Some(a)) => match idgate::listener::bind(a, shared.config.server.max_connections) {
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
    // The accept loop runs on a worker thread, not on this one (the
    // runtime's `block_on`): a session it spawns then starts on the same
    // worker (tokio's LIFO slot) instead of being handed to another thread,
    // which cost a futex wake and two context switches per connection.
    let server = tokio::spawn(idgate::server::run(listener, shared, stopped(stop_rx)));
    if let Err(e) = server.await {
        if e.is_panic() {
            std::panic::resume_unwind(e.into_panic());
        }
    }
    if let Some(r) = resp {
        let _ = r.await;
    }
    if let Some(a) = allocator {
        // Gives snowflake node ids back; sequences' unused ids become a gap.
        a.shutdown().await;
    }
    ExitCode::SUCCESS
}

/// `rules.source = "etcd"`: the rules to start with (published now, or
/// the cache file while etcd is down) and the allocator: with the
/// generators prepared, or, from the cache file, with none running yet
/// (`follow::start_pending` starts them once etcd answers).
async fn start_published(
    cfg: &Config,
    r: &idgate::config::RulesConfig,
) -> Result<(RuleSet, Allocator, idgate::publish::start::Initial), String> {
    use idgate::idgen::{AllocatorOptions, SystemClock};
    let store = Allocator::open_store(&cfg.allocator)
        .await
        .map_err(|e| format!("cannot open the id allocator: {e}"))?;
    let timeout = std::time::Duration::from_millis(cfg.allocator.store_timeout_ms);
    let published = idgate::publish::Published::new(store.clone(), timeout);
    let mut initial =
        idgate::publish::start::initial(&published, r.cache_file.as_deref(), &shard_names(cfg))
            .await
            .map_err(|e| format!("rules refused: {e}"))?;
    let rules = std::mem::take(&mut initial.rules);
    let options = AllocatorOptions {
        timeout: std::time::Duration::from_millis(cfg.allocator.request_timeout_ms),
    };
    let prepared: &[idgate::rules::GeneratorRule] = match &initial.from_cache {
        None => rules.generators(),
        Some(_) => &[],
    };
    let allocator = Allocator::with_options(store, Arc::new(SystemClock::new()), prepared, options)
        .await
        .map_err(|e| format!("cannot open the id allocator: {e}"))?;
    match (&initial.from_cache, initial.version) {
        (Some(from), _) => warn!(
            "rules from the {from}; INSERTs that need ids fail with 1467 until etcd answers, then idgate catches up with the published version"
        ),
        (None, 0) => warn!(
            prefix = %cfg.allocator.etcd_prefix,
            "no rules version published yet (rules.source = \"etcd\"): idgate relays every statement until `idgate rules push`"
        ),
        (None, v) => info!(
            version = v,
            generators = rules.generators().len(),
            tables = rules.tables().len(),
            "rules loaded from etcd"
        ),
    }
    Ok((rules, allocator, initial))
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

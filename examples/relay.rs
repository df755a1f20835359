//! The floor under any tokio proxy: a relay that forwards bytes between a
//! client and one backend and does nothing else, on the runtime idgate uses
//! (multi-thread, two workers unless told, TCP_NODELAY both ways). It reads
//! no packet and parses nothing, so what separates it from HAProxy in one
//! run (`scripts/bench.sh --relay`, target `tokio_relay`) is the runtime and
//! the relay loop, and what separates idgate from it is idgate's own work.
//!
//! `SPIN` (default 0) adds that many iterations of an opaque loop before
//! each chunk from the client is forwarded: CPU spent per statement
//! without another system call or allocation, to measure what a given
//! amount of a proxy's user time costs in throughput on the same machine.
//! `TOUCH_KIB` (default 0) makes each such chunk also write one byte in
//! every 64-byte line of a buffer that large (the session's own): a
//! working set per statement, to see what a proxy's cache footprint
//! costs the processes it shares the cores with.
//!
//! With `RELAY_PER_CORE=1` in its environment it runs `WORKERS` threads
//! instead, each a current-thread runtime with its own listener on the
//! same port (`SO_REUSEPORT`: the kernel spreads the connections): one
//! event loop per thread as HAProxy runs, to compare with tokio's
//! work-stealing scheduler (what `server.session_threads` is built on).
//!
//!   cargo run --release --example relay -- LISTEN BACKEND [SPIN] [WORKERS] [TOUCH_KIB]

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (listen, backend) = match &args[..] {
        [l, b, ..] => (l.clone(), b.clone()),
        _ => {
            eprintln!("usage: relay LISTEN BACKEND [SPIN] [WORKERS] [TOUCH_KIB]");
            std::process::exit(2);
        }
    };
    let number = |i: usize, default: u64| match args.get(i).map(|s| s.parse::<u64>()) {
        None => default,
        Some(Ok(n)) => n,
        Some(Err(e)) => {
            eprintln!("relay: argument {} ({:?}): {e}", i + 1, args[i]);
            std::process::exit(2);
        }
    };
    let spin = number(2, 0);
    let workers = number(3, 2).max(1) as usize;
    let touch = number(4, 0) as usize * 1024;
    let per_core = std::env::var("RELAY_PER_CORE").is_ok_and(|v| v == "1");
    if !per_core {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .enable_all()
            .build()
            .expect("tokio runtime");
        rt.block_on(serve(listen, backend, false, spin, touch));
        return;
    }
    let threads: Vec<_> = (0..workers)
        .map(|_| {
            let (listen, backend) = (listen.clone(), backend.clone());
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("tokio runtime");
                rt.block_on(serve(listen, backend, true, spin, touch));
            })
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
}

/// Accepts on `listen` (a listener of its own on a shared port with
/// `reuse_port`) and relays each connection on this runtime.
async fn serve(listen: String, backend: String, reuse_port: bool, spin: u64, touch: usize) {
    let bound = listen
        .parse::<std::net::SocketAddr>()
        .map_err(std::io::Error::other)
        .and_then(|addr| {
            let socket = tokio::net::TcpSocket::new_v4()?;
            socket.set_reuseaddr(true)?;
            socket.set_reuseport(reuse_port)?;
            socket.bind(addr)?;
            socket.listen(1024)
        });
    let listener: TcpListener = match bound {
        Ok(l) => l,
        Err(e) => {
            eprintln!("relay: cannot listen on {listen}: {e}");
            std::process::exit(1);
        }
    };
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        let backend = backend.clone();
        tokio::spawn(async move {
            if let Err(e) = relay(client, &backend, spin, touch).await {
                eprintln!("relay: {e}");
            }
        });
    }
}

/// Forwards both ways until either side closes.
async fn relay(
    mut client: TcpStream,
    backend: &str,
    spin: u64,
    touch: usize,
) -> std::io::Result<()> {
    client.set_nodelay(true)?;
    let mut server = TcpStream::connect(backend).await?;
    server.set_nodelay(true)?;
    let (mut from_client, mut from_server) = (vec![0u8; 16384], vec![0u8; 16384]);
    let mut working_set = vec![0u8; touch];
    loop {
        tokio::select! {
            n = client.read(&mut from_client) => {
                let n = n?;
                if n == 0 {
                    return Ok(());
                }
                burn(spin);
                for line in working_set.chunks_mut(64) {
                    line[0] = line[0].wrapping_add(1);
                }
                std::hint::black_box(&working_set);
                server.write_all(&from_client[..n]).await?;
            }
            n = server.read(&mut from_server) => {
                let n = n?;
                if n == 0 {
                    return Ok(());
                }
                client.write_all(&from_server[..n]).await?;
            }
        }
    }
}

/// `n` iterations the optimizer cannot remove (4 instructions each,
/// counted with callgrind).
fn burn(n: u64) {
    let mut x = 0u64;
    for i in 0..n {
        x = std::hint::black_box(x.wrapping_add(i));
    }
    std::hint::black_box(x);
}

//! Criterion benchmarks of packet framing over a loopback TCP connection
//! (`protocol::packet::PacketConn`): the plain path every statement and
//! every relayed reply takes. A change to the stream under `PacketConn`
//! (plain or TLS) must not cost anything here.
//!
//! - `ping_pong/64B`: one small packet each way (a point select's round trip
//!   as idgate sees it: command in, reply out).
//! - `relay/64KiB`: 64 KiB of framed packets written in one call and read
//!   back with `fill`/`consume`, as the relay passes a reply on.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use idgate::protocol::packet::{frame, PacketConn};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;

async fn pair() -> (PacketConn, PacketConn) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (a, b) = tokio::join!(TcpStream::connect(addr), listener.accept());
    (PacketConn::new(a.unwrap()), PacketConn::new(b.unwrap().0))
}

fn bench(c: &mut Criterion) {
    let rt = Runtime::new().unwrap();
    let (mut a, mut b) = rt.block_on(pair());
    let mut g = c.benchmark_group("packet");
    let payload = vec![3u8; 64];
    let mut buf = Vec::new();
    let mut buf2 = Vec::new();
    g.throughput(Throughput::Elements(1));
    g.bench_function("ping_pong/64B", |bench| {
        bench.iter(|| {
            rt.block_on(async {
                a.write_packet(0, &payload).await.unwrap();
                b.read_packet(&mut buf, 1 << 20).await.unwrap();
                b.write_packet(1, &buf).await.unwrap();
                a.read_packet(&mut buf2, 1 << 20).await.unwrap();
            })
        })
    });
    let mut framed = Vec::new();
    let mut seq = 0u8;
    while framed.len() < 64 * 1024 - 300 {
        seq = frame(&mut framed, seq, &[7u8; 250]).wrapping_add(1);
    }
    g.throughput(Throughput::Bytes(framed.len() as u64));
    g.bench_function("relay/64KiB", |bench| {
        bench.iter(|| {
            rt.block_on(async {
                let (w, r) = tokio::join!(a.write_raw(&framed), async {
                    let mut got = 0;
                    while got < framed.len() {
                        b.fill().await.unwrap();
                        let n = b.buffered().len();
                        got += n;
                        b.consume(n);
                    }
                });
                w.unwrap();
                r
            })
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

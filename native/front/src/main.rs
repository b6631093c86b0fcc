//! `thaw-front`: Thaw's native front before one `thaw serve` (decision 0032).
//!
//!     client ─HTTP/1.1─▶ thaw-front (HOST:PORT) ─HTTP/1.1 over a private Unix socket─▶ thaw serve
//!            ─gRPC────▶            (GRPC PORT)  ─HTTP/2 over another──────────────▶ its gRPC
//!                          └─ hot infers ─▶ the relay of each hot instance's stub socket ─▶ stub
//!
//! Everything is forwarded, whole (forward.rs, grpc.rs), but the hot Python models' infers,
//! answered here (accept.rs, request_doc.rs, hot.rs, answer.rs; gRPC: grpc_proto.rs) through
//! executes sent on the stubs' own sockets, which the front relays (relay.rs, wire.rs) for
//! `thaw serve`, told what is hot over the control socket (ctlsock.rs, registry.rs, stats.rs).
//! `thaw serve --front native` (runtime/process/native_front.py) starts it, reads its
//! `THAW_FRONT_LISTENING` line, and stops it through its standard input (control.rs). One
//! event-loop thread (tokio's current-thread runtime), as the spike that measured the design
//! (benchmarks/native_front_spike).

mod accept;
mod answer;
mod args;
mod body;
mod connections;
mod control;
mod ctlsock;
mod encoding;
mod forward;
mod framing;
mod grpc;
mod grpc_proto;
mod guard;
mod hot;
mod registry;
mod relay;
mod request_doc;
mod seqpacket;
mod stats;
mod stream;
mod upstream;
mod wire;

use std::io;
use std::sync::Arc;

use tokio::net::{TcpListener, TcpSocket};

use crate::connections::Front;
use crate::control::Command;

const LISTENING: &str = "THAW_FRONT_LISTENING";
const GRPC_LISTENING: &str = "THAW_FRONT_GRPC";
const OPEN: &str = "THAW_FRONT_OPEN";
const REPORT_EVERY: std::time::Duration = std::time::Duration::from_millis(50);

fn bind(address: std::net::SocketAddr, reuse_port: bool) -> io::Result<TcpListener> {
    let socket = if address.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    if reuse_port {
        socket.set_reuseport(true)?;
    }
    socket.bind(address)?;
    socket.listen(1024)
}

/// Remove the gone server's socket and its directory, when the directory is left empty.
fn remove_socket(socket: &std::path::Path) {
    let _ = std::fs::remove_file(socket);
    if let Some(directory) = socket.parent() {
        let _ = std::fs::remove_dir(directory); // fails, harmlessly, unless empty
    }
}

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.iter().any(|a| a == "--help" || a == "-h") {
        println!("{}", args::USAGE);
        return;
    }
    let args = match args::parse(&argv) {
        Ok(args) => args,
        Err(why) => {
            eprintln!("thaw-front: error: {why}\n{}", args::USAGE);
            std::process::exit(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    if let Err(exc) = runtime.block_on(run(args)) {
        eprintln!("thaw-front: error: {exc}");
        std::process::exit(1);
    }
}

async fn run(args: args::Args) -> io::Result<()> {
    let listener = bind(args.listen, args.reuse_port).map_err(|exc| {
        io::Error::new(
            exc.kind(),
            format!("cannot listen on {}: {exc}", args.listen),
        )
    })?;
    let grpc_listener = match args.grpc_listen {
        Some(address) => Some(bind(address, args.grpc_reuse_port).map_err(|exc| {
            io::Error::new(exc.kind(), format!("cannot listen on {address}: {exc}"))
        })?),
        None => None,
    };
    let limits = guard::Limits {
        head: args.head_timeout,
        idle: args.idle_timeout,
    };
    let registry = match args.control_fd {
        Some(fd) => Some(ctlsock::start(fd).map_err(|exc| {
            io::Error::new(exc.kind(), format!("cannot use --control-fd {fd}: {exc}"))
        })?),
        None => None,
    };
    let front = Arc::new(Front::new(
        upstream::client(args.upstream.clone()),
        registry.clone(),
        limits,
        args.max_connections,
    ));
    let mut commands = control::commands();
    if let (Some(grpc_listener), Some(grpc_upstream)) = (grpc_listener, &args.grpc_upstream) {
        let grpc_front = Arc::new(grpc::GrpcFront {
            registry,
            http: front.upstream.clone(),
            grpc: grpc::grpc_client(grpc_upstream.clone()),
            handshake: limits.head,
            max_calls: args.max_connections,
            calls: std::sync::atomic::AtomicUsize::new(0),
        });
        println!("{GRPC_LISTENING} {}", grpc_listener.local_addr()?);
        tokio::spawn(grpc::listen(grpc_front, grpc_listener, front.drain_watch()));
    }
    let bound = listener.local_addr()?;
    println!("{LISTENING} http://{bound}");
    let stop = loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => { tokio::spawn(connections::serve(front.clone(), stream)); }
                // Out of descriptors and the like: the connection is lost, the front goes on.
                Err(exc) => eprintln!("thaw-front: accept failed: {exc}"),
            },
            command = commands.recv() => match command {
                Some(Command::Stop { deadline, idle }) => break (deadline, idle),
                None => {
                    // Standard input ended: `thaw serve` is gone, however it went (a SIGKILL
                    // too), and nobody else will remove the socket it listened on.
                    remove_socket(&args.upstream);
                    return Ok(());
                }
            },
        }
    };
    drop(listener); // no more connections
    let (deadline, idle) = stop;
    front.drain(idle);
    // The open count, each time it changes: `thaw serve` logs Triton's countdown from it.
    let report = async {
        let mut last = usize::MAX;
        loop {
            let open = front.open();
            if open != last {
                println!("{OPEN} {open}");
                last = open;
            }
            if open == 0 {
                return;
            }
            tokio::time::sleep(REPORT_EVERY).await;
        }
    };
    let drained = tokio::time::timeout(deadline, report).await.is_ok();
    if args.control_fd.is_some() {
        // The hot models' stubs are still relayed here: `thaw serve` unloads them (each
        // model's finalize() goes through the relay) and then ends the front's input. What
        // is still open closes after its answer.
        front.drain(std::time::Duration::ZERO);
        while commands.recv().await.is_some() {}
        return Ok(());
    }
    if !drained {
        eprintln!(
            "thaw-front: {} connection(s) still open at the stop's deadline: closed",
            front.open()
        );
    }
    Ok(())
}

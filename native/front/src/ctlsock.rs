//! The control socket from `thaw serve` (`--control-fd N`): an AF_UNIX SOCK_SEQPACKET socket,
//! one JSON object per datagram, descriptors in SCM_RIGHTS. Python → front: `relay`, `serve`,
//! `retire`, `stats`, `pause`; front → Python: `retired`, `stats`. Its end leaves the front
//! running (standard input's end is what ends it).

use std::os::unix::io::{FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;

use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::registry::{InputSpec, Registry, Relay, Served};
use crate::relay;
use crate::seqpacket::{Received, SeqPacket};

/// Start serving the control socket `fd`; the registry its messages fill.
pub fn start(fd: RawFd) -> std::io::Result<Arc<Registry>> {
    // SAFETY: the descriptor was inherited for the front, named by --control-fd.
    let socket = Arc::new(SeqPacket::new(unsafe { OwnedFd::from_raw_fd(fd) })?);
    let (replies, mut outgoing) = mpsc::unbounded_channel::<Value>();
    let registry = Registry::new(replies);
    let writer = socket.clone();
    tokio::spawn(async move {
        while let Some(reply) = outgoing.recv().await {
            let text = reply.to_string();
            if writer.send(text.as_bytes(), &[]).await.is_err() {
                break;
            }
        }
    });
    tokio::spawn(read(socket, registry.clone()));
    Ok(registry)
}

async fn read(socket: Arc<SeqPacket>, registry: Arc<Registry>) {
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        match socket.recv(&mut buffer).await {
            Ok(Received::Datagram(size, fds)) => {
                match serde_json::from_slice::<Value>(&buffer[..size]) {
                    Ok(message) => handle(&registry, message, fds),
                    Err(exc) => eprintln!("thaw-front: a control message is not JSON: {exc}"),
                }
            }
            Ok(Received::Reset) => continue,
            Ok(Received::End) => return,
            Err(exc) => {
                eprintln!("thaw-front: the control socket failed: {exc}");
                return;
            }
        }
    }
}

fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// One control message (its descriptors owned: passed on or closed).
pub fn handle(registry: &Arc<Registry>, message: Value, fds: Vec<OwnedFd>) {
    match message.get("op").and_then(Value::as_str) {
        Some("relay") => start_relay(registry, &message, fds),
        Some("serve") => match served(&message) {
            Some(row) => {
                let unversioned = message["unversioned"].as_bool().unwrap_or(false);
                registry.serve(row, unversioned)
            }
            None => eprintln!("thaw-front: a serve message the front cannot read: {message}"),
        },
        Some("retire") if message.get("instance").is_some() => registry.retire_instance(
            &text(&message["model"]),
            &text(&message["version"]),
            &message["instance"],
            message["seq"].clone(),
        ),
        Some("retire") => registry.retire(
            &text(&message["model"]),
            &text(&message["version"]),
            message["seq"].clone(),
        ),
        Some("stats") => {
            let rows = registry.stats.take();
            let pending = registry.pending();
            let _ = registry.replies.send(
                json!({"op": "stats", "seq": message["seq"], "rows": rows, "pending": pending}),
            );
        }
        Some("pause") => registry.pause(message["value"].as_bool().unwrap_or(false)),
        _ => eprintln!("thaw-front: unknown control message {message} ignored"),
    }
}

fn start_relay(registry: &Arc<Registry>, message: &Value, fds: Vec<OwnedFd>) {
    let mut fds = fds.into_iter();
    let (Some(stub_end), Some(server_end), None) = (fds.next(), fds.next(), fds.next()) else {
        eprintln!("thaw-front: a relay message without exactly two descriptors: ignored");
        return;
    };
    let (stub, server) = match (SeqPacket::new(stub_end), SeqPacket::new(server_end)) {
        (Ok(stub), Ok(server)) => (stub, server),
        _ => {
            eprintln!("thaw-front: a relay's sockets could not be used");
            return;
        }
    };
    let (model, version) = (text(&message["model"]), text(&message["version"]));
    let (to_stub, from_front) = mpsc::unbounded_channel();
    let id = registry.next_relay_id();
    let relayed = Arc::new(Relay::new(
        id,
        message["instance"].clone(),
        text(&message["name"]),
        to_stub,
    ));
    registry.add_relay(&model, &version, relayed.clone());
    tokio::spawn(relay::run(
        registry.clone(),
        relayed,
        stub,
        server,
        from_front,
    ));
}

fn served(message: &Value) -> Option<Served> {
    let inputs = message["inputs"]
        .as_array()?
        .iter()
        .map(|input| {
            Some(InputSpec {
                name: input["name"].as_str()?.to_string(),
                datatype: input["datatype"].as_str()?.to_string(),
                dims: input["dims"]
                    .as_array()?
                    .iter()
                    .map(Value::as_i64)
                    .collect::<Option<Vec<i64>>>()?,
            })
        })
        .collect::<Option<Vec<_>>>()?;
    let outputs = message["outputs"]
        .as_array()?
        .iter()
        .map(|output| {
            Some((
                output["name"].as_str()?.to_string(),
                output["datatype"].as_str().unwrap_or("").to_string(),
            ))
        })
        .collect::<Option<Vec<_>>>()?;
    Some(Served {
        model: text(&message["model"]),
        version: text(&message["version"]),
        max_batch_size: message["max_batch_size"].as_i64().unwrap_or(0),
        inputs,
        outputs,
        token: text(&message["token"]),
        stdlib_json: message["stdlib_json"].as_bool().unwrap_or(false),
    })
}

//! A relay between one stub and its `thaw serve` channel: every datagram, with its
//! descriptors, passed on unchanged and in order both ways; the front's own executes join the
//! server → stub stream, and the stub's answers to them are taken out of the other.

use std::os::unix::io::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;

use tokio::sync::mpsc;

use crate::registry::{Registry, ToStub};
use crate::seqpacket::{Received, SeqPacket};
use crate::wire;

/// Large enough for any datagram either side sends (theirs stay under 160 KiB).
const BUFFER: usize = 1 << 20;

/// Run the relay until both sides are gone. `to_stub` brings the front's executes.
pub async fn run(
    registry: Arc<Registry>,
    relay: u64,
    stub: SeqPacket,
    server: SeqPacket,
    to_stub: mpsc::UnboundedReceiver<ToStub>,
) {
    let stub = Arc::new(stub);
    let server = Arc::new(server);
    let down = tokio::spawn(server_to_stub(server.clone(), stub.clone(), to_stub));
    stub_to_server(&registry, &stub, &server).await;
    // The stub is gone: its executes fail, and Python's channel sees the end.
    registry.relay_ended(relay);
    server.shutdown();
    let _ = down.await;
}

fn raws(fds: &[OwnedFd]) -> Vec<RawFd> {
    fds.iter().map(|fd| fd.as_raw_fd()).collect()
}

async fn server_to_stub(
    server: Arc<SeqPacket>,
    stub: Arc<SeqPacket>,
    mut front: mpsc::UnboundedReceiver<ToStub>,
) {
    let mut buffer = vec![0u8; BUFFER];
    let mut front_open = true;
    loop {
        tokio::select! {
            biased;
            received = server.recv(&mut buffer) => match received {
                Ok(Received::Datagram(size, fds)) => {
                    if stub.send(&buffer[..size], &raws(&fds)).await.is_err() {
                        break;
                    }
                    drop(fds); // our copies, once sent
                }
                Ok(Received::Reset) => continue,
                Ok(Received::End) | Err(_) => break,
            },
            execute = front.recv(), if front_open => match execute {
                Some(execute) => {
                    if stub.send(&execute.payload, &raws(&execute.fds)).await.is_err() {
                        break;
                    }
                }
                None => front_open = false,
            },
        }
    }
    // The server's side ended (or the stub's can no longer be written): close the stub's end.
    stub.shutdown();
}

async fn stub_to_server(registry: &Registry, stub: &SeqPacket, server: &SeqPacket) {
    let mut buffer = vec![0u8; BUFFER];
    let mut resets = 0;
    loop {
        let (size, fds) = match stub.recv(&mut buffer).await {
            Ok(Received::Datagram(size, fds)) => (size, fds),
            // Linux reports the reset before the datagrams the stub wrote before it went.
            Ok(Received::Reset) if resets < 2 => {
                resets += 1;
                continue;
            }
            Ok(_) | Err(_) => return,
        };
        resets = 0;
        let payload = &buffer[..size];
        match take_front_answers(registry, payload, fds) {
            Pass::Whole(fds) => {
                if server.send(payload, &raws(&fds)).await.is_err() {
                    // Python's side is gone: the stub's side goes too (server_to_stub ends).
                    stub.shutdown();
                }
            }
            Pass::Rest(rest) => {
                if !rest.is_empty() && server.send(&rest, &[]).await.is_err() {
                    stub.shutdown();
                }
            }
        }
    }
}

enum Pass {
    /// Relay the datagram as it came, with its descriptors.
    Whole(Vec<OwnedFd>),
    /// Relay this instead (what is left of a bundle; empty: nothing).
    Rest(Vec<u8>),
}

/// Take the front's answers out of one datagram from a stub.
fn take_front_answers(registry: &Registry, payload: &[u8], fds: Vec<OwnedFd>) -> Pass {
    if payload.first() == Some(&b'B') {
        let Ok(parts) = wire::split_bundle(payload) else {
            return Pass::Whole(fds);
        };
        let mut kept: Vec<&[u8]> = Vec::with_capacity(parts.len());
        let mut taken = false;
        for part in parts {
            let exec = wire::peek_fields(part, &[])
                .ok()
                .flatten()
                .and_then(|f| wire::front_exec(&f));
            match exec {
                Some(exec) => {
                    taken = true;
                    if let Ok(message) = wire::decode(part, Vec::new()) {
                        registry.deliver(exec, message);
                    }
                }
                None => kept.push(part),
            }
        }
        if !taken {
            return Pass::Whole(fds);
        }
        return Pass::Rest(if kept.is_empty() {
            Vec::new()
        } else {
            wire::bundle(&kept)
        });
    }
    let exec = wire::peek_fields(payload, &fds)
        .ok()
        .flatten()
        .and_then(|f| wire::front_exec(&f));
    match exec {
        Some(exec) => {
            match wire::decode(payload, fds) {
                Ok(message) => registry.deliver(exec, message),
                Err(exc) => eprintln!("thaw-front: a stub's answer could not be read: {exc}"),
            }
            Pass::Rest(Vec::new())
        }
        None => Pass::Whole(fds),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::{Event, Relay, Served};
    use crate::seqpacket::tests_support::pair;
    use serde_json::{json, Value};

    #[tokio::test]
    async fn relays_both_ways_and_takes_front_answers() {
        let (tx, _rx) = mpsc::unbounded_channel();
        let registry = Registry::new(tx);
        let (stub_far, stub_near) = pair();
        let (server_near, server_far) = pair();
        let (to_stub, from_front) = mpsc::unbounded_channel();
        let id = registry.next_relay_id();
        let relay = Arc::new(Relay {
            id,
            instance: Value::from(0),
            name: "m_0".into(),
            to_stub,
        });
        registry.serve(
            Served {
                model: "m".into(),
                version: "1".into(),
                max_batch_size: 0,
                inputs: vec![],
                outputs: vec![],
                token: "t".into(),
                stdlib_json: false,
            },
            false,
        );
        registry.add_relay("m", "1", relay.clone());
        let task = tokio::spawn(run(
            registry.clone(),
            id,
            stub_near,
            server_near,
            from_front,
        ));
        let mut buffer = vec![0u8; 4096];
        // Python → stub, with a descriptor.
        let (extra, _keep) = pair();
        server_far.send(b"python", &[extra.raw()]).await.unwrap();
        match stub_far.recv(&mut buffer).await.unwrap() {
            Received::Datagram(6, fds) => assert_eq!(fds.len(), 1),
            _ => panic!("not relayed"),
        }
        // The front's execute, then the stub's answer to it (taken) and one to Python.
        let mut execute = registry.begin("m", "1").unwrap();
        let encoded = wire::encode(&json!({"op": "execute", "id": execute.id}), &[]).unwrap();
        relay
            .to_stub
            .send(ToStub {
                payload: encoded.payload.clone(),
                fds: encoded.fds,
            })
            .unwrap();
        assert!(matches!(
            stub_far.recv(&mut buffer).await.unwrap(),
            Received::Datagram(_, _)
        ));
        let ours = wire::encode(&json!({"op": "done", "id": execute.id}), &[]).unwrap();
        let theirs = wire::encode(&json!({"op": "done", "id": 1}), &[]).unwrap();
        let both = wire::bundle(&[&ours.payload, &theirs.payload]);
        stub_far.send(&both, &[]).await.unwrap();
        match execute.events.recv().await.unwrap() {
            Event::Message(message) => assert_eq!(message.fields["op"], "done"),
            Event::Unhealthy => panic!("not the done"),
        }
        match server_far.recv(&mut buffer).await.unwrap() {
            Received::Datagram(size, _) => assert_eq!(&buffer[..size], &theirs.payload[..]),
            _ => panic!("not relayed"),
        }
        // The stub ends: the execute fails, Python's side sees the end.
        drop(stub_far);
        assert!(matches!(
            execute.events.recv().await.unwrap(),
            Event::Unhealthy
        ));
        assert!(matches!(
            server_far.recv(&mut buffer).await.unwrap(),
            Received::End
        ));
        task.await.unwrap();
        assert!(!registry.has_relay("m", "1"));
    }
}

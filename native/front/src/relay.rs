//! A relay between one stub and its `thaw serve` channel: every datagram, with its
//! descriptors, passed on unchanged and in order both ways; the front's own executes join the
//! server → stub stream, and the stub's answers to them are taken out of the other.

use std::os::unix::io::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;

use tokio::sync::mpsc;

use crate::registry::{Exec, Registry, Relay, ToStub};
use crate::seqpacket::{Received, SeqPacket};
use crate::wire;

/// Large enough for any datagram either side sends (theirs stay under 160 KiB).
const BUFFER: usize = 1 << 20;

/// Run the relay until both sides are gone. `to_stub` brings the front's executes.
pub async fn run(
    registry: Arc<Registry>,
    relay: Arc<Relay>,
    stub: SeqPacket,
    server: SeqPacket,
    to_stub: mpsc::UnboundedReceiver<ToStub>,
) {
    let stub = Arc::new(stub);
    let server = Arc::new(server);
    let down = tokio::spawn(server_to_stub(
        server.clone(),
        stub.clone(),
        to_stub,
        relay.clone(),
    ));
    stub_to_server(&registry, &relay, &stub, &server).await;
    // The stub is gone: the execute it ran fails, the front's later ones go to `thaw serve`,
    // and Python's channel sees the end.
    registry.relay_ended(relay.id, relay.running());
    server.shutdown();
    let _ = down.await;
}

/// The ids of the server's executes in a datagram it sends the stub (a bundle: each part's).
fn server_executes(payload: &[u8], fds: &[OwnedFd]) -> Vec<u64> {
    let execute_id = |fields: Option<serde_json::Value>| {
        let fields = fields?;
        (fields.get("op")?.as_str()? == "execute").then(|| fields.get("id")?.as_u64())?
    };
    if payload.first() == Some(&b'B') {
        return wire::split_bundle(payload)
            .map(|parts| {
                parts
                    .into_iter()
                    .filter_map(|part| execute_id(wire::peek_fields(part, &[]).ok().flatten()))
                    .collect()
            })
            .unwrap_or_default();
    }
    execute_id(wire::peek_fields(payload, fds).ok().flatten())
        .into_iter()
        .collect()
}

/// The id of the server's execute a stub's message answers (`done`), if it is one.
fn server_done(fields: &serde_json::Value) -> Option<u64> {
    (fields.get("op")?.as_str()? == "done").then(|| fields.get("id")?.as_u64())?
}

fn raws(fds: &[OwnedFd]) -> Vec<RawFd> {
    fds.iter().map(|fd| fd.as_raw_fd()).collect()
}

async fn server_to_stub(
    server: Arc<SeqPacket>,
    stub: Arc<SeqPacket>,
    mut front: mpsc::UnboundedReceiver<ToStub>,
    relay: Arc<Relay>,
) {
    let mut buffer = vec![0u8; BUFFER];
    let mut front_open = true;
    loop {
        tokio::select! {
            biased;
            received = server.recv(&mut buffer) => match received {
                Ok(Received::Datagram(size, fds)) => {
                    for id in server_executes(&buffer[..size], &fds) {
                        relay.sent(Exec::Server(id));
                    }
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
                    if execute.exec != 0 {
                        relay.sent(Exec::Front(execute.exec));
                    }
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

async fn stub_to_server(registry: &Registry, relay: &Relay, stub: &SeqPacket, server: &SeqPacket) {
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
        match take_front_answers(registry, relay, payload, fds) {
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

/// Note an answer in the stub's order of executes: a `done` ends the execute it answers.
fn note_answer(relay: &Relay, fields: &serde_json::Value) {
    if let Some(exec) = wire::front_exec(fields) {
        if fields.get("op").and_then(serde_json::Value::as_str) == Some("done") {
            relay.answered(Exec::Front(exec));
        }
    } else if let Some(id) = server_done(fields) {
        relay.answered(Exec::Server(id));
    }
}

/// A model's `is_cancelled()` for one of the front's executes (the stub's `call`, `args` =
/// [exec id, request index]): answered here, since only the front knows whether its client
/// went away; true once it stopped waiting.
fn answer_cancelled(registry: &Registry, relay: &Relay, fields: &serde_json::Value) -> bool {
    let asks = fields.get("op").and_then(serde_json::Value::as_str) == Some("call")
        && fields.get("fn").and_then(serde_json::Value::as_str) == Some("is_cancelled");
    let exec = fields
        .get("args")
        .and_then(|args| args.get(0))
        .and_then(serde_json::Value::as_u64);
    let Some(exec) = exec.filter(|id| asks && *id >= wire::FRONT_IDS) else {
        return false;
    };
    let reply = serde_json::json!({
        "op": "reply", "call": fields.get("call").cloned().unwrap_or_default(),
        "value": !registry.waiting(exec),
    });
    if let Ok(encoded) = wire::encode(&reply, &[]) {
        let _ = relay.to_stub.send(ToStub {
            exec: 0,
            payload: encoded.payload,
            fds: encoded.fds,
        });
    }
    true
}

/// Take the front's answers out of one datagram from a stub.
fn take_front_answers(
    registry: &Registry,
    relay: &Relay,
    payload: &[u8],
    fds: Vec<OwnedFd>,
) -> Pass {
    if payload.first() == Some(&b'B') {
        let Ok(parts) = wire::split_bundle(payload) else {
            return Pass::Whole(fds);
        };
        let mut kept: Vec<&[u8]> = Vec::with_capacity(parts.len());
        let mut taken = false;
        for part in parts {
            let fields = wire::peek_fields(part, &[]).ok().flatten();
            if let Some(fields) = &fields {
                note_answer(relay, fields);
                if answer_cancelled(registry, relay, fields) {
                    taken = true;
                    continue;
                }
            }
            match fields.as_ref().and_then(wire::front_exec) {
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
    if payload.first() == Some(&b'I') && fds.is_empty() {
        // The usual answer: read it whole once (its header says whose it is).
        return match wire::decode(payload, Vec::new()) {
            Ok(message) => {
                note_answer(relay, &message.fields);
                if answer_cancelled(registry, relay, &message.fields) {
                    return Pass::Rest(Vec::new());
                }
                match wire::front_exec(&message.fields) {
                    Some(exec) => {
                        registry.deliver(exec, message);
                        Pass::Rest(Vec::new())
                    }
                    None => Pass::Whole(fds),
                }
            }
            Err(_) => Pass::Whole(fds), // the server's to make sense of
        };
    }
    let fields = wire::peek_fields(payload, &fds).ok().flatten();
    if let Some(fields) = &fields {
        note_answer(relay, fields);
        if answer_cancelled(registry, relay, fields) {
            return Pass::Rest(Vec::new());
        }
    }
    match fields.as_ref().and_then(wire::front_exec) {
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
        let relay = Arc::new(Relay::new(id, Value::from(0), "m_0".into(), to_stub));
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
            relay.clone(),
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
                exec: execute.id,
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
            _ => panic!("not the done"),
        }
        match server_far.recv(&mut buffer).await.unwrap() {
            Received::Datagram(size, _) => assert_eq!(&buffer[..size], &theirs.payload[..]),
            _ => panic!("not relayed"),
        }
        // A model asks whether the request was cancelled: the front answers (its client is
        // there while the execute waits; gone once it stopped waiting).
        for cancelled in [false, true] {
            if cancelled {
                registry.finish_for_tests(execute.id);
            }
            let call = json!({"op": "call", "call": 3, "fn": "is_cancelled",
                              "args": [execute.id, 0]});
            let asked = wire::encode(&call, &[]).unwrap();
            stub_far.send(&asked.payload, &[]).await.unwrap();
            let size = match stub_far.recv(&mut buffer).await.unwrap() {
                Received::Datagram(size, _) => size,
                _ => panic!("no reply"),
            };
            let reply = wire::decode(&buffer[..size], Vec::new()).unwrap();
            assert_eq!(
                reply.fields,
                json!({"op": "reply", "call": 3, "value": cancelled})
            );
        }
        drop(execute);
        // Two more of the front's, behind one of Python's: the stub runs Python's first.
        let python = wire::encode(&json!({"op": "execute", "id": 2}), &[]).unwrap();
        server_far.send(&python.payload, &[]).await.unwrap();
        assert!(matches!(
            stub_far.recv(&mut buffer).await.unwrap(),
            Received::Datagram(_, _)
        ));
        let mut waiting = Vec::new();
        for _ in 0..2 {
            let execute = registry.begin("m", "1").unwrap();
            let encoded = wire::encode(&json!({"op": "execute", "id": execute.id}), &[]).unwrap();
            relay
                .to_stub
                .send(ToStub {
                    exec: execute.id,
                    payload: encoded.payload,
                    fds: encoded.fds,
                })
                .unwrap();
            assert!(matches!(
                stub_far.recv(&mut buffer).await.unwrap(),
                Received::Datagram(_, _)
            ));
            waiting.push(execute);
        }
        assert_eq!(relay.running(), Some(Exec::Server(2)));
        assert_eq!(registry.pending(), vec![json!(["m", "1", 2])]);
        // Python's is answered: the first of the front's runs, the other waits behind it.
        let done = wire::encode(&json!({"op": "done", "id": 2}), &[]).unwrap();
        stub_far.send(&done.payload, &[]).await.unwrap();
        assert!(matches!(
            server_far.recv(&mut buffer).await.unwrap(),
            Received::Datagram(_, _)
        ));
        assert_eq!(relay.running(), Some(Exec::Front(waiting[0].id)));
        assert_eq!(registry.pending(), vec![json!(["m", "1", 1])]);
        // The stub ends: the one it ran fails, the one it never started is `thaw serve`'s,
        // and Python's side sees the end.
        drop(stub_far);
        assert!(matches!(
            waiting[0].events.recv().await.unwrap(),
            Event::Unhealthy
        ));
        assert!(matches!(
            waiting[1].events.recv().await.unwrap(),
            Event::NotStarted
        ));
        assert!(matches!(
            server_far.recv(&mut buffer).await.unwrap(),
            Received::End
        ));
        task.await.unwrap();
        assert!(!registry.has_relay("m", "1"));
    }
}

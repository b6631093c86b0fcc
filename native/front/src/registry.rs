//! What the control socket told the front: the served model versions, the live relays, the
//! front's executes in flight, the pause, and the retires waiting for executes to end.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::mpsc;

use crate::stats::Stats;
use crate::wire::{Message, FRONT_IDS};

/// One input of a served version's config.
#[derive(Debug, Clone, PartialEq)]
pub struct InputSpec {
    pub name: String,
    pub datatype: String,
    pub dims: Vec<i64>,
}

/// A version the front answers (`serve`).
#[derive(Debug, Clone)]
pub struct Served {
    pub model: String,
    pub version: String,
    pub max_batch_size: i64,
    pub inputs: Vec<InputSpec>,
    pub outputs: Vec<(String, String)>,
    pub token: String,
    /// `thaw serve` writes JSON with the stdlib alone (no orjson there): so does the front.
    pub stdlib_json: bool,
}

/// What a relay delivers to an execute's waiter.
#[derive(Debug)]
pub enum Event {
    Message(Message),
    /// The stub ended with the execute in flight.
    Unhealthy,
}

/// A datagram for a relay to send to its stub (after Python's earlier ones).
#[derive(Debug)]
pub struct ToStub {
    pub payload: Vec<u8>,
    pub fds: Vec<std::os::unix::io::OwnedFd>,
}

pub struct Relay {
    pub id: u64,
    pub instance: Value,
    pub name: String,
    pub to_stub: mpsc::UnboundedSender<ToStub>,
}

struct Pending {
    key: (String, String),
    relay: u64,
    events: mpsc::UnboundedSender<Event>,
}

#[derive(Default)]
struct Inner {
    routes: HashMap<String, (String, String)>,
    served: HashMap<(String, String), Arc<Served>>,
    relays: HashMap<(String, String), Vec<Arc<Relay>>>,
    pending: HashMap<u64, Pending>,
    in_flight: HashMap<(String, String), usize>,
    per_relay: HashMap<u64, usize>,
    retiring: HashMap<(String, String), Vec<Value>>,
    paused: bool,
    next_exec: u64,
    next_relay: u64,
}

/// The registry, shared by the control socket, the relays and the connections.
pub struct Registry {
    inner: Mutex<Inner>,
    /// Replies to Python (ctlsock.rs's writer sends them).
    pub replies: mpsc::UnboundedSender<Value>,
    pub stats: Stats,
}

fn key(model: &str, version: &str) -> (String, String) {
    (model.to_string(), version.to_string())
}

/// An execute the front sent: its id, relay and events; ended (counted out) when dropped.
pub struct Execute {
    pub id: u64,
    pub relay: Arc<Relay>,
    pub events: mpsc::UnboundedReceiver<Event>,
    registry: Arc<Registry>,
}

impl Drop for Execute {
    fn drop(&mut self) {
        self.registry.finish(self.id);
    }
}

impl Registry {
    pub fn new(replies: mpsc::UnboundedSender<Value>) -> Arc<Registry> {
        Arc::new(Registry {
            inner: Mutex::new(Inner {
                next_exec: FRONT_IDS,
                ..Inner::default()
            }),
            replies,
            stats: Stats::default(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn next_relay_id(&self) -> u64 {
        let mut inner = self.lock();
        inner.next_relay += 1;
        inner.next_relay
    }

    /// A relay for (model, version, instance), replacing an earlier one of that instance.
    pub fn add_relay(&self, model: &str, version: &str, relay: Arc<Relay>) {
        let mut inner = self.lock();
        let list = inner.relays.entry(key(model, version)).or_default();
        list.retain(|r| r.instance != relay.instance);
        list.push(relay);
    }

    /// The relay ended: forget it; its executes in flight are failed (`Unhealthy`).
    pub fn relay_ended(&self, relay: u64) {
        let mut inner = self.lock();
        for list in inner.relays.values_mut() {
            list.retain(|r| r.id != relay);
        }
        for pending in inner.pending.values() {
            if pending.relay == relay {
                let _ = pending.events.send(Event::Unhealthy);
            }
        }
    }

    /// Deliver a stub's answer to one of the front's executes (dropped if nobody waits).
    pub fn deliver(&self, exec: u64, message: Message) {
        let inner = self.lock();
        if let Some(pending) = inner.pending.get(&exec) {
            let _ = pending.events.send(Event::Message(message));
        }
    }

    pub fn serve(&self, served: Served, unversioned: bool) {
        let mut inner = self.lock();
        let (m, v) = (served.model.clone(), served.version.clone());
        let plain = |path: &str| !path.contains('%') && !path.contains('?');
        let versioned = format!("/v2/models/{m}/versions/{v}/infer");
        if plain(&versioned) {
            inner.routes.insert(versioned, key(&m, &v));
        }
        let bare = format!("/v2/models/{m}/infer");
        if unversioned && plain(&bare) {
            inner.routes.insert(bare, key(&m, &v));
        } else if inner.routes.get(&bare) == Some(&key(&m, &v)) {
            inner.routes.remove(&bare);
        }
        inner.served.insert(key(&m, &v), Arc::new(served));
    }

    /// Stop answering (model, version); `seq` is replied once its executes are all answered.
    pub fn retire(&self, model: &str, version: &str, seq: Value) {
        let mut inner = self.lock();
        let k = key(model, version);
        inner.served.remove(&k);
        inner.routes.retain(|_, target| *target != k);
        if inner.in_flight.get(&k).copied().unwrap_or(0) == 0 {
            drop(inner);
            let _ = self
                .replies
                .send(serde_json::json!({"op": "retired", "seq": seq}));
        } else {
            inner.retiring.entry(k).or_default().push(seq);
        }
    }

    pub fn pause(&self, value: bool) {
        self.lock().paused = value;
    }

    /// The served version `path` names, unless paused.
    pub fn route(&self, path: &str) -> Option<Arc<Served>> {
        let inner = self.lock();
        if inner.paused {
            return None;
        }
        let k = inner.routes.get(path)?;
        inner.served.get(k).cloned()
    }

    /// The served version a gRPC `ModelInfer` names (`version` "": the model's unversioned
    /// route), unless paused: the same rows as the HTTP routes.
    pub fn route_model(&self, model: &str, version: &str) -> Option<Arc<Served>> {
        if model.is_empty() || model.contains('/') || version.contains('/') {
            return None;
        }
        let path = if version.is_empty() {
            format!("/v2/models/{model}/infer")
        } else {
            format!("/v2/models/{model}/versions/{version}/infer")
        };
        self.route(&path)
            .filter(|s| s.model == model && (version.is_empty() || s.version == version))
    }

    /// Whether (model, version) has a live relay.
    pub fn has_relay(&self, model: &str, version: &str) -> bool {
        let inner = self.lock();
        inner
            .relays
            .get(&key(model, version))
            .is_some_and(|l| !l.is_empty())
    }

    /// Start an execute on the least busy live relay of (model, version), if the version is
    /// still served and has one.
    pub fn begin(self: &Arc<Self>, model: &str, version: &str) -> Option<Execute> {
        let mut inner = self.lock();
        let k = key(model, version);
        if !inner.served.contains_key(&k) {
            return None;
        }
        let relay = {
            let list = inner.relays.get(&k)?;
            list.iter()
                .min_by_key(|r| inner.per_relay.get(&r.id).copied().unwrap_or(0))?
                .clone()
        };
        let id = inner.next_exec;
        inner.next_exec += 1;
        let (events, receiver) = mpsc::unbounded_channel();
        inner.pending.insert(
            id,
            Pending {
                key: k.clone(),
                relay: relay.id,
                events,
            },
        );
        *inner.in_flight.entry(k).or_default() += 1;
        *inner.per_relay.entry(relay.id).or_default() += 1;
        Some(Execute {
            id,
            relay,
            events: receiver,
            registry: self.clone(),
        })
    }

    fn finish(&self, exec: u64) {
        let mut inner = self.lock();
        let Some(pending) = inner.pending.remove(&exec) else {
            return;
        };
        if let Some(count) = inner.per_relay.get_mut(&pending.relay) {
            *count -= 1;
            if *count == 0 {
                inner.per_relay.remove(&pending.relay);
            }
        }
        let left = match inner.in_flight.get_mut(&pending.key) {
            Some(count) => {
                *count -= 1;
                *count
            }
            None => 0,
        };
        if left == 0 {
            inner.in_flight.remove(&pending.key);
            if let Some(seqs) = inner.retiring.remove(&pending.key) {
                for seq in seqs {
                    let _ = self
                        .replies
                        .send(serde_json::json!({"op": "retired", "seq": seq}));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn served(m: &str, v: &str) -> Served {
        Served {
            model: m.into(),
            version: v.into(),
            max_batch_size: 0,
            inputs: vec![],
            outputs: vec![],
            token: "t".into(),
            stdlib_json: false,
        }
    }

    #[test]
    fn routes_retires_and_waits_for_executes() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let registry = Registry::new(tx);
        registry.serve(served("m", "1"), true);
        assert!(registry.route("/v2/models/m/infer").is_some());
        assert!(registry.route("/v2/models/m/versions/1/infer").is_some());
        assert!(registry.route("/v2/models/m/versions/1/infer/").is_none());
        registry.pause(true);
        assert!(registry.route("/v2/models/m/infer").is_none());
        registry.pause(false);
        assert!(registry.begin("m", "1").is_none()); // no relay
        let (to_stub, _keep) = mpsc::unbounded_channel();
        let relay = Arc::new(Relay {
            id: registry.next_relay_id(),
            instance: Value::from(0),
            name: "m_0".into(),
            to_stub,
        });
        registry.add_relay("m", "1", relay.clone());
        let execute = registry.begin("m", "1").unwrap();
        assert_eq!(execute.id, FRONT_IDS);
        registry.retire("m", "1", Value::from(7));
        assert!(registry.route("/v2/models/m/infer").is_none());
        assert!(rx.try_recv().is_err()); // still in flight
        drop(execute);
        assert_eq!(rx.try_recv().unwrap()["seq"], 7);
        registry.retire("m", "1", Value::from(8));
        assert_eq!(rx.try_recv().unwrap()["seq"], 8);
    }
}

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
    /// The stub ended while running the execute.
    Unhealthy,
    /// The stub ended before it started the execute: `thaw serve` runs the request (it waits
    /// for the instance's next stub, as Triton's queue waits for its instance).
    NotStarted,
}

/// An execute on a stub's socket, the front's or the server's: the stub runs them one at a
/// time, in the order they reach it, and answers each (`done`) before it starts the next.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Exec {
    Front(u64),
    Server(u64),
}

/// A datagram for a relay to send to its stub (after Python's earlier ones).
#[derive(Debug)]
pub struct ToStub {
    /// The execute this is (0: a reply to the stub, not an execute).
    pub exec: u64,
    pub payload: Vec<u8>,
    pub fds: Vec<std::os::unix::io::OwnedFd>,
}

pub struct Relay {
    pub id: u64,
    pub instance: Value,
    pub name: String,
    pub to_stub: mpsc::UnboundedSender<ToStub>,
    /// The executes sent to the stub and not yet answered, oldest (the running one) first.
    pub order: Mutex<std::collections::VecDeque<Exec>>,
}

impl Relay {
    pub fn new(
        id: u64,
        instance: Value,
        name: String,
        to_stub: mpsc::UnboundedSender<ToStub>,
    ) -> Relay {
        Relay {
            id,
            instance,
            name,
            to_stub,
            order: Mutex::new(std::collections::VecDeque::new()),
        }
    }

    fn order(&self) -> std::sync::MutexGuard<'_, std::collections::VecDeque<Exec>> {
        self.order.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An execute goes to the stub (after those sent before it).
    pub fn sent(&self, exec: Exec) {
        self.order().push_back(exec);
    }

    /// The stub answered an execute.
    pub fn answered(&self, exec: Exec) {
        let mut order = self.order();
        if let Some(at) = order.iter().position(|e| *e == exec) {
            order.remove(at);
        }
    }

    /// The execute the stub runs now (the oldest unanswered), if any.
    pub fn running(&self) -> Option<Exec> {
        self.order().front().copied()
    }

    /// The front's executes waiting behind the running one.
    pub fn front_waiting(&self) -> usize {
        let order = self.order();
        order
            .iter()
            .skip(1)
            .filter(|e| matches!(e, Exec::Front(_)))
            .count()
    }
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
    /// Relays taken out of service (`retire` of one instance), each set with the `seq` to
    /// reply once the front's executes on all of them are answered.
    retiring_relays: Vec<(std::collections::HashSet<u64>, Value)>,
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

    /// The relay ended: forget it; the execute the stub was running fails (`Unhealthy`), the
    /// front's later ones never started (`NotStarted`).
    pub fn relay_ended(&self, relay: u64, running: Option<Exec>) {
        let mut inner = self.lock();
        for list in inner.relays.values_mut() {
            list.retain(|r| r.id != relay);
        }
        for (id, pending) in &inner.pending {
            if pending.relay == relay {
                let event = if running == Some(Exec::Front(*id)) {
                    Event::Unhealthy
                } else {
                    Event::NotStarted
                };
                let _ = pending.events.send(event);
            }
        }
    }

    /// Per (model, version): the front's executes waiting behind the one each stub runs (for
    /// `nv_inference_pending_request_count`, which counts them as `thaw serve` counts its own).
    pub fn pending(&self) -> Vec<Value> {
        let inner = self.lock();
        let mut rows: Vec<Value> = inner
            .relays
            .iter()
            .map(|((m, v), list)| {
                let waiting: usize = list.iter().map(|r| r.front_waiting()).sum();
                serde_json::json!([m, v, waiting])
            })
            .collect();
        rows.sort_by_key(|row| row.to_string());
        rows
    }

    /// Whether the client of one of the front's executes still waits for it (a model's
    /// `is_cancelled()` is the opposite).
    pub fn waiting(&self, exec: u64) -> bool {
        self.lock().pending.contains_key(&exec)
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

    /// Stop sending executes to one instance of (model, version) (its model is being
    /// finalized); `seq` is replied once the front's executes on it are answered.
    pub fn retire_instance(&self, model: &str, version: &str, instance: &Value, seq: Value) {
        let mut inner = self.lock();
        let mut gone = std::collections::HashSet::new();
        if let Some(list) = inner.relays.get_mut(&key(model, version)) {
            list.retain(|r| {
                let keep = r.instance != *instance;
                if !keep {
                    gone.insert(r.id);
                }
                keep
            });
        }
        gone.retain(|id| inner.per_relay.get(id).copied().unwrap_or(0) > 0);
        if gone.is_empty() {
            drop(inner);
            let _ = self
                .replies
                .send(serde_json::json!({"op": "retired", "seq": seq}));
        } else {
            inner.retiring_relays.push((gone, seq));
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

    #[cfg(test)]
    pub fn finish_for_tests(&self, exec: u64) {
        self.finish(exec);
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
                let mut answered = Vec::new();
                inner.retiring_relays.retain_mut(|(relays, seq)| {
                    relays.remove(&pending.relay);
                    let done = relays.is_empty();
                    if done {
                        answered.push(seq.clone());
                    }
                    !done
                });
                for seq in answered {
                    let _ = self
                        .replies
                        .send(serde_json::json!({"op": "retired", "seq": seq}));
                }
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
        let relay = Arc::new(Relay::new(
            registry.next_relay_id(),
            Value::from(0),
            "m_0".into(),
            to_stub,
        ));
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

    #[test]
    fn an_instance_retires_alone() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let registry = Registry::new(tx);
        registry.serve(served("m", "1"), true);
        let mut keep = Vec::new();
        for instance in 0..2 {
            let (to_stub, receiver) = mpsc::unbounded_channel();
            keep.push(receiver);
            let relay = Relay::new(
                registry.next_relay_id(),
                Value::from(instance),
                format!("m_{instance}"),
                to_stub,
            );
            registry.add_relay("m", "1", Arc::new(relay));
        }
        let first = registry.begin("m", "1").unwrap();
        let second = registry.begin("m", "1").unwrap(); // the least busy: the other instance
        assert_ne!(first.relay.id, second.relay.id);
        let retired = first.relay.instance.clone();
        registry.retire_instance("m", "1", &retired, Value::from(9));
        assert!(rx.try_recv().is_err()); // its execute is still in flight
                                         // The version is still served, by the other instance alone.
        for _ in 0..3 {
            let next = registry.begin("m", "1").unwrap();
            assert_eq!(next.relay.id, second.relay.id);
        }
        drop(second);
        assert!(rx.try_recv().is_err());
        drop(first);
        assert_eq!(rx.try_recv().unwrap()["seq"], 9);
        registry.retire_instance("m", "1", &Value::from(5), Value::from(10)); // none such
        assert_eq!(rx.try_recv().unwrap()["seq"], 10);
    }
}

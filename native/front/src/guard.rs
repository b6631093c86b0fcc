//! A client connection's deadlines, as `thaw serve`'s own (thawserver/connection_guard.py),
//! from two signals: bytes arriving (the stream, io.rs) and a request being served (its answer
//! written to its last byte):
//!
//!     HEAD     waiting for a request's head: since the accept, or since the first byte after
//!              an idle spell. Past the head deadline: answered 408 and closed (closed silently
//!              when not a byte came).
//!     REQUEST  a request is served: no deadline (the body's is `thaw serve`'s).
//!     IDLE     kept alive after an answer: closed silently past the idle deadline (while the
//!              front stops, past the shorter of it and the stop's idle time).
//!
//! `expiry` is the pure decision; `Activity` is one connection's phase, shared by its stream,
//! its requests and its watchdog (connections.rs).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Phase {
    Head { since: Instant, bytes: bool },
    Request { in_flight: usize },
    Idle { since: Instant },
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Action {
    /// Answer 408 (the head deadline's answer) and close.
    AnswerTimeout,
    /// Close without a word.
    Close,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    pub head: Option<Duration>,
    pub idle: Option<Duration>,
}

/// When `phase` expires and what then, under `limits` (and `drain_idle` while the front stops).
pub fn expiry(
    phase: Phase,
    limits: Limits,
    drain_idle: Option<Duration>,
) -> Option<(Instant, Action)> {
    match phase {
        Phase::Head { since, bytes } => limits.head.map(|head| {
            (
                since + head,
                if bytes {
                    Action::AnswerTimeout
                } else {
                    Action::Close
                },
            )
        }),
        Phase::Request { .. } => None,
        Phase::Idle { since } => {
            let idle = match (limits.idle, drain_idle) {
                (Some(idle), Some(drain)) => Some(idle.min(drain)),
                (idle, drain) => idle.or(drain),
            };
            idle.map(|idle| (since + idle, Action::Close))
        }
    }
}

/// One connection's phase; `changed` wakes its watchdog.
pub struct Activity {
    phase: Mutex<Phase>,
    pub changed: Notify,
    /// The request being read must close the connection after its answer (framing.rs).
    close_after: AtomicBool,
}

impl Activity {
    /// A connection just accepted: its head is due from now.
    pub fn accepted(now: Instant) -> Self {
        Activity {
            phase: Mutex::new(Phase::Head {
                since: now,
                bytes: false,
            }),
            changed: Notify::new(),
            close_after: AtomicBool::new(false),
        }
    }

    pub fn close_after(&self) {
        self.close_after.store(true, Ordering::SeqCst);
    }

    pub fn closes_after(&self) -> bool {
        self.close_after.load(Ordering::SeqCst)
    }

    pub fn phase(&self) -> Phase {
        *self.phase.lock().expect("the phase lock")
    }

    fn set(&self, phase: Phase) {
        *self.phase.lock().expect("the phase lock") = phase;
        self.changed.notify_one();
    }

    /// Bytes came: after an idle spell, a head begins.
    pub fn bytes_arrived(&self, now: Instant) {
        let mut phase = self.phase.lock().expect("the phase lock");
        match *phase {
            Phase::Idle { .. } => {
                *phase = Phase::Head {
                    since: now,
                    bytes: true,
                }
            }
            Phase::Head {
                since,
                bytes: false,
            } => *phase = Phase::Head { since, bytes: true },
            _ => return,
        }
        drop(phase);
        self.changed.notify_one();
    }

    /// A request's head is in: it is served.
    pub fn request_began(&self) {
        let in_flight = match self.phase() {
            Phase::Request { in_flight } => in_flight + 1,
            _ => 1,
        };
        self.set(Phase::Request { in_flight });
    }

    /// A request's answer is written (or abandoned).
    pub fn request_ended(&self, now: Instant) {
        match self.phase() {
            Phase::Request { in_flight } if in_flight > 1 => self.set(Phase::Request {
                in_flight: in_flight - 1,
            }),
            _ => self.set(Phase::Idle { since: now }),
        }
    }
}

/// The head deadline's answer, the bytes `thaw serve` writes (thawserver/connection_guard.py).
pub fn timeout_answer(head: Duration) -> Vec<u8> {
    answer(
        408,
        "Request Timeout",
        &format!("request head not received in {} s", seconds(head)),
        "",
    )
}

/// The answer past the open-connection cap.
pub fn full_answer(cap: usize) -> Vec<u8> {
    answer(
        503,
        "Service Unavailable",
        &format!("the server holds {cap} connections, its limit; retry later"),
        "Retry-After: 1\r\n",
    )
}

/// Seconds as Python's `{:g}` writes them (10, 0.5, 2.25).
fn seconds(duration: Duration) -> String {
    let text = format!("{:.6}", duration.as_secs_f64());
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A complete answer that closes its connection: `{"error": message}` in JSON, `extra` header
/// lines (each ending in CRLF) after `Connection: close`.
pub fn answer(status: u16, phrase: &str, message: &str, extra: &str) -> Vec<u8> {
    let body = serde_json::json!({ "error": message }).to_string();
    format!(
        "HTTP/1.1 {status} {phrase}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n{extra}\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        head: Some(Duration::from_secs(10)),
        idle: Some(Duration::from_secs(75)),
    };

    #[test]
    fn a_head_expires_with_an_answer_only_when_bytes_came() {
        let t = Instant::now();
        let s = Duration::from_secs(10);
        assert_eq!(
            expiry(
                Phase::Head {
                    since: t,
                    bytes: true
                },
                LIMITS,
                None
            ),
            Some((t + s, Action::AnswerTimeout))
        );
        assert_eq!(
            expiry(
                Phase::Head {
                    since: t,
                    bytes: false
                },
                LIMITS,
                None
            ),
            Some((t + s, Action::Close))
        );
        assert_eq!(
            expiry(
                Phase::Head {
                    since: t,
                    bytes: true
                },
                Limits {
                    head: None,
                    ..LIMITS
                },
                None
            ),
            None
        );
    }

    #[test]
    fn a_request_never_expires_and_idle_takes_the_shorter_limit() {
        let t = Instant::now();
        assert_eq!(
            expiry(
                Phase::Request { in_flight: 1 },
                LIMITS,
                Some(Duration::ZERO)
            ),
            None
        );
        let idle = Phase::Idle { since: t };
        assert_eq!(
            expiry(idle, LIMITS, None),
            Some((t + Duration::from_secs(75), Action::Close))
        );
        assert_eq!(
            expiry(idle, LIMITS, Some(Duration::from_secs(5))),
            Some((t + Duration::from_secs(5), Action::Close))
        );
        let no_idle = Limits {
            idle: None,
            ..LIMITS
        };
        assert_eq!(expiry(idle, no_idle, None), None);
        assert_eq!(
            expiry(idle, no_idle, Some(Duration::from_secs(5))),
            Some((t + Duration::from_secs(5), Action::Close))
        );
    }

    #[test]
    fn phases_follow_bytes_and_requests() {
        let t = Instant::now();
        let activity = Activity::accepted(t);
        activity.bytes_arrived(t + Duration::from_secs(1));
        assert_eq!(
            activity.phase(),
            Phase::Head {
                since: t,
                bytes: true
            }
        ); // from the accept
        activity.request_began();
        activity.bytes_arrived(t + Duration::from_secs(2)); // the body: still the request
        assert_eq!(activity.phase(), Phase::Request { in_flight: 1 });
        activity.request_ended(t + Duration::from_secs(3));
        assert_eq!(
            activity.phase(),
            Phase::Idle {
                since: t + Duration::from_secs(3)
            }
        );
        activity.bytes_arrived(t + Duration::from_secs(4));
        assert_eq!(
            activity.phase(),
            Phase::Head {
                since: t + Duration::from_secs(4),
                bytes: true
            }
        );
    }

    #[test]
    fn answers_as_thaw_serve_does() {
        let answer = String::from_utf8(timeout_answer(Duration::from_millis(2500))).unwrap();
        assert!(answer.starts_with("HTTP/1.1 408 Request Timeout\r\n"));
        assert!(answer.ends_with("\r\n\r\n{\"error\":\"request head not received in 2.5 s\"}"));
        assert!(answer.contains("Content-Length: 46\r\n"));
        assert_eq!(seconds(Duration::from_secs(10)), "10");
        let full = String::from_utf8(full_answer(3)).unwrap();
        assert!(
            full.contains("503 Service Unavailable") && full.contains("Retry-After: 1\r\n\r\n")
        );
    }
}

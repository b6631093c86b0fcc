//! The client connections: each served by hyper under its deadlines (guard.rs), capped in
//! number, and drained on a stop as `thaw serve` drains its own
//! (thawserver/connection_drain.py): no more accepts; every answer written from then on says
//! `Connection: close`; a connection idle for the stop's idle time is closed.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hyper::header::{HeaderValue, CONNECTION};
use hyper::server::conn::Http;
use hyper::service::service_fn;
use hyper::Response;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::{sleep_until, timeout, Instant};

use crate::body::GuardedBody;
use crate::forward::forward;
use crate::guard::{expiry, full_answer, timeout_answer, Action, Activity, Limits};
use crate::hot;
use crate::registry::Registry;
use crate::stream::{shut_write, GuardedStream};
use crate::upstream::Upstream;

/// How long a refused connection is read (and dropped) after its 503, so the client reads the
/// answer rather than a reset.
const LINGER: Duration = Duration::from_secs(1);

/// What every connection shares: the upstream, the limits, the drain.
pub struct Front {
    pub upstream: Upstream,
    /// The control socket's registry (`--control-fd`): versions answered here.
    pub registry: Option<Arc<Registry>>,
    http: Http,
    limits: Limits,
    max_connections: usize,
    /// Set by a stop: the idle time of a connection during the drain.
    draining: watch::Sender<Option<Duration>>,
    open: AtomicUsize,
}

impl Front {
    pub fn new(
        upstream: Upstream,
        registry: Option<Arc<Registry>>,
        limits: Limits,
        max_connections: usize,
    ) -> Self {
        let mut http = Http::new();
        http.http1_only(true)
            .http1_keep_alive(true)
            .http1_preserve_header_case(true)
            .http1_title_case_headers(true);
        Front {
            upstream,
            registry,
            http,
            limits,
            max_connections,
            draining: watch::channel(None).0,
            open: AtomicUsize::new(0),
        }
    }

    /// Start the drain: connections idle for `idle` are closed, answers say `Connection: close`.
    pub fn drain(&self, idle: Duration) {
        let _ = self.draining.send(Some(idle));
    }

    /// How many connections are open.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }

    /// The drain, as it is set (gRPC connections are sent GOAWAY when it starts).
    pub fn drain_watch(&self) -> watch::Receiver<Option<Duration>> {
        self.draining.subscribe()
    }

    fn draining(&self) -> bool {
        self.draining.borrow().is_some()
    }
}

/// Serve one accepted connection until it closes (or refuse it past the cap).
pub async fn serve(front: Arc<Front>, socket: TcpStream) {
    let _ = socket.set_nodelay(true);
    if front.max_connections > 0 && front.open() >= front.max_connections {
        refuse(socket, &full_answer(front.max_connections)).await;
        return;
    }
    front.open.fetch_add(1, Ordering::SeqCst);
    let socket = Arc::new(socket);
    let activity = Arc::new(Activity::accepted(Instant::now()));
    let service = {
        let (front, activity) = (front.clone(), activity.clone());
        service_fn(move |request| {
            activity.request_began();
            let (front, activity) = (front.clone(), activity.clone());
            async move {
                let answer = match &front.registry {
                    Some(registry) => {
                        hot::serve(registry.clone(), front.upstream.clone(), request).await?
                    }
                    None => forward(front.upstream.clone(), request).await?,
                };
                let (mut parts, body) = answer.into_parts();
                if front.draining() || activity.closes_after() {
                    parts
                        .headers
                        .insert(CONNECTION, HeaderValue::from_static("close"));
                }
                let body = GuardedBody::new(body, activity);
                Ok::<_, Infallible>(Response::from_parts(parts, body))
            }
        })
    };
    let stream = GuardedStream::new(socket.clone(), activity.clone());
    let connection = front.http.serve_connection(stream, service);
    tokio::pin!(connection);
    tokio::select! {
        _ = connection.as_mut() => {}
        action = watch(&activity, &front) => {
            if action == Action::AnswerTimeout {
                if let Some(head) = front.limits.head {
                    write_now(&socket, &timeout_answer(head)).await;
                }
            }
            let _ = shut_write(&socket);
        }
    }
    front.open.fetch_sub(1, Ordering::SeqCst);
}

/// The connection's deadline passing: what to do then.
async fn watch(activity: &Activity, front: &Front) -> Action {
    let mut draining = front.draining.subscribe();
    loop {
        let drain_idle = *draining.borrow_and_update();
        match expiry(activity.phase(), front.limits, drain_idle) {
            Some((due, action)) if due <= Instant::now() => return action,
            Some((due, _)) => tokio::select! {
                _ = sleep_until(due) => {}
                _ = activity.changed.notified() => {}
                _ = draining.changed() => {}
            },
            None => tokio::select! {
                _ = activity.changed.notified() => {}
                _ = draining.changed() => {}
            },
        }
    }
}

/// Write a short answer the socket's buffer takes at once (a client that reads nothing does
/// not hold the front: what does not fit within `LINGER` is dropped).
async fn write_now(socket: &TcpStream, answer: &[u8]) {
    let _ = timeout(LINGER, async {
        let mut rest = answer;
        while !rest.is_empty() {
            if socket.writable().await.is_err() {
                return;
            }
            match socket.try_write(rest) {
                Ok(n) => rest = &rest[n..],
                Err(exc) if exc.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(_) => return,
            }
        }
    })
    .await;
}

/// Answer `answer` and close, reading (and dropping) what the client still sends for a moment.
async fn refuse(mut socket: TcpStream, answer: &[u8]) {
    write_now(&socket, answer).await;
    let _ = shut_write(&socket);
    let mut sink = [0u8; 4096];
    let _ = timeout(LINGER, async {
        while matches!(socket.read(&mut sink).await, Ok(n) if n > 0) {}
    })
    .await;
}

//! The connection to the front's `thaw serve`: HTTP/1.1 over its private Unix socket, kept
//! alive in hyper's pool (a request on a pooled connection the server closed meanwhile is sent
//! again on a new one: hyper retries a request that was never written).

use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::client::connect::{Connected, Connection};
use hyper::{Body, Client, Uri};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::UnixStream;
use tower_service::Service;

/// Pooled connections idle this long are closed by the front, well before `thaw serve`'s own
/// idle deadline (75 s by default) would close them under a request.
const POOL_IDLE: Duration = Duration::from_secs(20);

pub type Upstream = Client<UnixConnector, Body>;

/// An HTTP client whose every connection goes to the Unix socket at `path`.
pub fn client(path: PathBuf) -> Upstream {
    Client::builder()
        .pool_idle_timeout(POOL_IDLE)
        .set_host(false) // the client's own Host header goes through, as it came
        .http1_preserve_header_case(true)
        .build(UnixConnector(Arc::new(path)))
}

/// hyper's connector for a Unix socket (the URI's host is ignored).
#[derive(Clone)]
pub struct UnixConnector(Arc<PathBuf>);

impl UnixConnector {
    pub fn new(path: PathBuf) -> Self {
        UnixConnector(Arc::new(path))
    }
}

impl Service<Uri> for UnixConnector {
    type Response = UnixConnection;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<UnixConnection>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Uri) -> Self::Future {
        let path = self.0.clone();
        Box::pin(async move { Ok(UnixConnection(UnixStream::connect(&*path).await?)) })
    }
}

pub struct UnixConnection(UnixStream);

impl Connection for UnixConnection {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}

impl AsyncRead for UnixConnection {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for UnixConnection {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

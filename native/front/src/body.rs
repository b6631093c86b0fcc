//! An answer's body as the client receives it: `thaw serve`'s, streamed, holding its request
//! "in flight" until its last byte is written (a long server-sent-events answer is a request
//! being served, not an idle connection). Its size hint is the upstream's, so a known length
//! is still sent as `Content-Length`.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper::body::{Bytes, HttpBody, SizeHint};
use hyper::{Body, HeaderMap};
use tokio::time::Instant;

use crate::guard::Activity;

pub struct GuardedBody {
    inner: Body,
    activity: Option<Arc<Activity>>,
}

impl GuardedBody {
    pub fn new(inner: Body, activity: Arc<Activity>) -> Self {
        GuardedBody {
            inner,
            activity: Some(activity),
        }
    }

    fn end(&mut self) {
        if let Some(activity) = self.activity.take() {
            activity.request_ended(Instant::now());
        }
    }
}

impl Drop for GuardedBody {
    fn drop(&mut self) {
        self.end(); // written, or abandoned with its connection
    }
}

impl HttpBody for GuardedBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_data(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, hyper::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_data(cx);
        if let Poll::Ready(None) = polled {
            self.end();
        }
        polled
    }

    fn poll_trailers(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Option<HeaderMap>, hyper::Error>> {
        Pin::new(&mut self.inner).poll_trailers(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

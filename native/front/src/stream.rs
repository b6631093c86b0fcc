//! A client connection's stream as hyper reads and writes it, telling its `Activity` when bytes
//! arrive; the socket is shared (`Arc`) so the watchdog can write the head deadline's answer
//! and shut it down while hyper holds the stream.
//!
//! hyper answers a request it cannot parse (a bad request line, header or chunk size, a head
//! too large) itself, with an empty body, before any service sees it. `thaw serve` answers
//! those in JSON, as every error; so the stream recognises hyper's own answer (a 4xx head
//! without the `Server` header every answer of Thaw's carries) and writes Thaw's instead: the
//! same status, `{"error": ...}`, `Connection: close`. hyper closes the connection after it.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::framing::{Framing, Verdict};
use crate::guard::{answer, Activity};

/// The header that tells Thaw's own answers from hyper's (`replace_parse_error`).
const THAWS: &str = "Server: thaw\r\n";

pub struct GuardedStream {
    socket: Arc<TcpStream>,
    activity: Arc<Activity>,
    framing: Framing,
    /// Refused for its framing: the answer is written, then hyper reads the end.
    refused: bool,
    /// Thaw's answer in place of hyper's, still to write; then everything else is dropped.
    replacement: Option<Vec<u8>>,
}

impl GuardedStream {
    pub fn new(socket: Arc<TcpStream>, activity: Arc<Activity>) -> Self {
        GuardedStream {
            socket,
            activity,
            framing: Framing::default(),
            refused: false,
            replacement: None,
        }
    }

    fn poll_write_replacement(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some(rest) = self.replacement.as_mut().filter(|rest| !rest.is_empty()) {
            ready!(self.socket.poll_write_ready(cx))?;
            match self.socket.try_write(rest) {
                Ok(n) => {
                    rest.drain(..n);
                }
                Err(exc) if exc.kind() == io::ErrorKind::WouldBlock => continue,
                Err(exc) => return Poll::Ready(Err(exc)),
            }
        }
        Poll::Ready(Ok(()))
    }
}

/// Thaw's answer for `bytes` when they begin hyper's own answer to a request it could not
/// parse (a 4xx head without a `Server` header); None for any other bytes.
pub fn replace_parse_error(bytes: &[u8]) -> Option<Vec<u8>> {
    let rest = bytes.strip_prefix(b"HTTP/1.1 4")?;
    let end = bytes.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&bytes[..end]).ok()?;
    if head
        .lines()
        .skip(1)
        .any(|line| line.to_ascii_lowercase().starts_with("server:"))
    {
        return None;
    }
    let status_line = head.lines().next()?;
    let status: u16 = format!("4{}", std::str::from_utf8(rest.get(..2)?).ok()?)
        .parse()
        .ok()?;
    let phrase = status_line.splitn(3, ' ').nth(2).unwrap_or("Bad Request");
    let message = format!("the request is not valid HTTP/1.1 ({status} {phrase})");
    Some(answer(status, phrase, &message, THAWS))
}

impl AsyncRead for GuardedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            if self.refused {
                // The refusal first, then the end of the stream: hyper drops the request.
                ready!(self.poll_write_replacement(cx))?;
                let _ = shut_write(&self.socket);
                return Poll::Ready(Ok(()));
            }
            ready!(self.socket.poll_read_ready(cx))?;
            let before = buf.filled().len();
            match self.socket.try_read(buf.initialize_unfilled()) {
                Ok(n) => {
                    buf.advance(n);
                    if n == 0 {
                        return Poll::Ready(Ok(()));
                    }
                    self.activity.bytes_arrived(Instant::now());
                    match self.framing.feed(&buf.filled()[before..]) {
                        Ok(Verdict::Go) => {}
                        Ok(Verdict::CloseAfter) => self.activity.close_after(),
                        Err(why) => {
                            buf.set_filled(before); // hyper never sees them
                            self.refused = true;
                            self.replacement = Some(framing_refusal(&why));
                            continue;
                        }
                    }
                    return Poll::Ready(Ok(()));
                }
                Err(exc) if exc.kind() == io::ErrorKind::WouldBlock => continue,
                Err(exc) => return Poll::Ready(Err(exc)),
            }
        }
    }
}

/// The 400 for a request refused for its framing.
fn framing_refusal(why: &str) -> Vec<u8> {
    answer(
        400,
        "Bad Request",
        &format!("ambiguous request framing: {why}"),
        THAWS,
    )
}

impl AsyncWrite for GuardedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.replacement.is_none() {
            self.replacement = replace_parse_error(buf);
        }
        if self.replacement.is_some() {
            ready!(self.poll_write_replacement(cx))?;
            return Poll::Ready(Ok(buf.len())); // hyper's own answer, and anything after it
        }
        loop {
            ready!(self.socket.poll_write_ready(cx))?;
            match self.socket.try_write(buf) {
                Err(exc) if exc.kind() == io::ErrorKind::WouldBlock => continue,
                done => return Poll::Ready(done),
            }
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_write_replacement(cx) // nothing else is buffered here
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_write_replacement(cx))?;
        Poll::Ready(shut_write(&self.socket))
    }
}

/// No more bytes from this side (the client reads what was written, then the end).
pub fn shut_write(socket: &TcpStream) -> io::Result<()> {
    match socket2::SockRef::from(socket).shutdown(std::net::Shutdown::Write) {
        Err(exc) if exc.kind() == io::ErrorKind::NotConnected => Ok(()),
        done => done,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_only_hypers_own_error_answers() {
        let hypers =
            b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\ndate: x\r\n\r\n";
        let answer = String::from_utf8(replace_parse_error(hypers).unwrap()).unwrap();
        assert!(answer.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"));
        assert!(answer.contains("Content-Type: application/json\r\n"));
        assert!(answer.ends_with(
            "{\"error\":\"the request is not valid HTTP/1.1 (431 Request Header Fields Too Large)\"}"
        ));
        let thaws = b"HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\nServer: thaw\r\n\r\n{}";
        assert_eq!(replace_parse_error(thaws), None);
        assert_eq!(
            replace_parse_error(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"),
            None
        );
        assert_eq!(replace_parse_error(b"HTTP/1.1 400 Bad Req"), None); // no whole head
        assert_eq!(replace_parse_error(b"{\"error\": 1}"), None);
    }
}

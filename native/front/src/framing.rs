//! The client's bytes checked for ambiguous framing before hyper reads them, as strictly as
//! `thaw serve`'s own parser (aiohttp's llhttp and thawserver/chunked_over_length.py): hyper
//! takes a bare LF as a line end, control characters in a chunk extension, and a head with
//! both `Content-Length` and `Transfer-Encoding` (framed by chunked) — each a way to smuggle a
//! request past a proxy that frames it otherwise (docs/hardening.md). `Framing` follows each
//! message's framing through the stream (head, then the body by its length or its chunks) and
//! says when one is refused; everything else is hyper's to judge (a malformed head it refuses
//! itself, answered in JSON by stream.rs).
//!
//! A length beside `chunked` that ends the request at the same byte, with nothing after it, is
//! taken as chunked and its connection closed after the answer, as `thaw serve` takes it
//! (Triton's L0_http `test_content_encoding_chunked_manually`).

const MAX_HEAD: usize = 64 * 1024; // longer: hyper refuses it (431), nothing to follow
const MAX_LINE: usize = 4096; // a chunk-size or trailer line

#[derive(Debug, PartialEq)]
enum State {
    Head,
    Length(u64),
    ChunkSize,
    ChunkData(u64),
    ChunkDataEnd(usize), // bytes of its CRLF seen
    Trailer,
    /// A length beside chunked that agreed: anything after it is refused.
    Closed,
    /// Framing hyper refuses itself (it closes the connection): nothing more to follow.
    Untracked,
}

pub struct Framing {
    state: State,
    line: Vec<u8>,
    /// A `Content-Length` beside chunked, and the body's raw bytes counted so far.
    length_beside_chunked: Option<u64>,
    raw_body: u64,
}

/// What the bytes fed so far say.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    Go,
    /// The request whose body just ended must close its connection after its answer.
    CloseAfter,
}

impl Default for Framing {
    fn default() -> Self {
        Framing {
            state: State::Head,
            line: Vec::new(),
            length_beside_chunked: None,
            raw_body: 0,
        }
    }
}

fn header_values<'a>(lines: &'a [&'a [u8]], name: &str) -> Vec<&'a str> {
    lines
        .iter()
        .filter_map(|line| {
            let colon = line.iter().position(|&b| b == b':')?;
            let (field, value) = line.split_at(colon);
            std::str::from_utf8(field)
                .ok()
                .filter(|f| f.trim().eq_ignore_ascii_case(name))?;
            std::str::from_utf8(&value[1..]).ok().map(str::trim)
        })
        .collect()
}

/// Whether `line` (CRLF-ended) is `name: value` with a token name (RFC 9110 §5.1, 5.6.2).
fn is_field_line(line: &[u8]) -> bool {
    let Some(colon) = line.iter().position(|&b| b == b':') else {
        return false;
    };
    let token = |b: &u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(b);
    colon > 0 && line[..colon].iter().all(token)
}

impl Framing {
    /// Follow `bytes`, the next ones read from the client: Err(why) refuses the connection.
    pub fn feed(&mut self, mut bytes: &[u8]) -> Result<Verdict, String> {
        let mut verdict = Verdict::Go;
        while !bytes.is_empty() {
            match self.state {
                State::Untracked => return Ok(verdict),
                State::Closed => {
                    return Err("bytes after a request framed by both a length and chunked".into())
                }
                State::Length(left) => {
                    let take = left.min(bytes.len() as u64);
                    bytes = &bytes[take as usize..];
                    self.state = if take == left {
                        State::Head
                    } else {
                        State::Length(left - take)
                    };
                }
                State::ChunkData(left) => {
                    let take = left.min(bytes.len() as u64);
                    bytes = &bytes[take as usize..];
                    self.raw_body += take;
                    self.state = if take == left {
                        State::ChunkDataEnd(0)
                    } else {
                        State::ChunkData(left - take)
                    };
                }
                State::ChunkDataEnd(seen) => {
                    let wanted = b"\r\n"[seen];
                    if bytes[0] != wanted {
                        return Err("a chunk's data is not followed by CRLF".into());
                    }
                    bytes = &bytes[1..];
                    self.raw_body += 1;
                    self.state = if seen == 1 {
                        State::ChunkSize
                    } else {
                        State::ChunkDataEnd(1)
                    };
                }
                State::Head | State::ChunkSize | State::Trailer => {
                    let Some(end) = bytes.iter().position(|&b| b == b'\n') else {
                        self.line.extend_from_slice(bytes);
                        let cap = if self.state == State::Head {
                            MAX_HEAD
                        } else {
                            MAX_LINE
                        };
                        if self.line.len() > cap {
                            if self.state == State::Head {
                                self.state = State::Untracked;
                                return Ok(verdict);
                            }
                            return Err("a chunk-size or trailer line is too long".into());
                        }
                        return Ok(verdict);
                    };
                    self.line.extend_from_slice(&bytes[..=end]);
                    bytes = &bytes[end + 1..];
                    if self.line.len() < 2 || self.line[self.line.len() - 2] != b'\r' {
                        return Err("a line ends in a bare LF".into());
                    }
                    if self.state != State::Head {
                        self.raw_body += self.line.len() as u64;
                    }
                    match self.state {
                        State::ChunkSize => self.chunk_size()?,
                        State::Trailer => {
                            if self.line == b"\r\n" {
                                verdict = self.body_ended(!bytes.is_empty())?;
                            } else if !is_field_line(&self.line) {
                                return Err("a trailer is not a header field".into());
                            }
                            self.line.clear();
                        }
                        _ => {
                            // Head: a line of it; the head ends at an empty line (not the first).
                            if self.line.ends_with(b"\r\n\r\n") {
                                self.head_ended()?;
                            } else if self.line == b"\r\n" {
                                self.line.clear(); // CRLF before a request line: allowed
                            } else if self.line.len() > MAX_HEAD {
                                self.state = State::Untracked;
                            }
                        }
                    }
                }
            }
        }
        Ok(verdict)
    }

    fn head_ended(&mut self) -> Result<(), String> {
        let head = std::mem::take(&mut self.line);
        let lines: Vec<&[u8]> = head
            .split(|&b| b == b'\n')
            .skip(1)
            .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
            .filter(|l| !l.is_empty())
            .collect();
        let lengths = header_values(&lines, "content-length");
        let codings = header_values(&lines, "transfer-encoding");
        self.raw_body = 0;
        self.length_beside_chunked = None;
        if !codings.is_empty() {
            let last = codings
                .join(",")
                .rsplit(',')
                .map(|c| {
                    c.split(';')
                        .next()
                        .unwrap_or("")
                        .trim()
                        .to_ascii_lowercase()
                })
                .find(|c| !c.is_empty());
            if last.as_deref() != Some("chunked") {
                self.state = State::Untracked; // hyper refuses it
                return Ok(());
            }
            if !lengths.is_empty() {
                let [length] = lengths[..] else {
                    return Err("several Content-Length fields beside chunked".into());
                };
                let length = length
                    .parse::<u64>()
                    .map_err(|_| "a Content-Length beside chunked is not a number".to_string())?;
                self.length_beside_chunked = Some(length);
            }
            self.state = State::ChunkSize;
            return Ok(());
        }
        self.state = match lengths[..] {
            [] => State::Head,
            [length] => match length.parse::<u64>() {
                Ok(0) => State::Head,
                Ok(n) => State::Length(n),
                Err(_) => State::Untracked, // hyper refuses it
            },
            _ => State::Untracked,
        };
        Ok(())
    }

    fn chunk_size(&mut self) -> Result<(), String> {
        let line = std::mem::take(&mut self.line);
        let text = &line[..line.len() - 2];
        let (size, extension) = match text.iter().position(|&b| b == b';') {
            Some(at) => (&text[..at], Some(&text[at + 1..])),
            None => (text, None),
        };
        let size = std::str::from_utf8(size)
            .unwrap_or("")
            .trim_end_matches([' ', '\t']);
        if size.is_empty() || size.len() > 16 || !size.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err("a chunk size is not a hexadecimal number".into());
        }
        if let Some(extension) = extension {
            if extension
                .iter()
                .any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f)
            {
                return Err("a chunk extension holds a control character".into());
            }
        }
        let size =
            u64::from_str_radix(size, 16).map_err(|_| "a chunk size overflows".to_string())?;
        self.state = if size == 0 {
            State::Trailer
        } else {
            State::ChunkData(size)
        };
        Ok(())
    }

    fn body_ended(&mut self, more: bool) -> Result<Verdict, String> {
        self.state = State::Head;
        let Some(length) = self.length_beside_chunked.take() else {
            return Ok(Verdict::Go);
        };
        if length != self.raw_body || more {
            return Err("Content-Length and chunked disagree on where the request ends".into());
        }
        self.state = State::Closed;
        Ok(Verdict::CloseAfter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed_all(parts: &[&[u8]]) -> Result<Verdict, String> {
        let mut framing = Framing::default();
        let mut last = Verdict::Go;
        for part in parts {
            let verdict = framing.feed(part)?;
            if verdict == Verdict::CloseAfter {
                last = verdict;
            }
        }
        Ok(last)
    }

    const CHUNKED: &[u8] = b"POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";

    #[test]
    fn plain_requests_go_in_any_split() {
        let stream = [
            &b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"[..],
            b"POST /x HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc",
            CHUNKED,
            b"3;name=va lue\r\nabc\r\n0\r\nX-T: 1\r\n\r\n",
            b"GET / HTTP/1.0\r\n\r\n",
        ]
        .concat();
        for split in 0..stream.len() {
            let (a, b) = stream.split_at(split);
            assert_eq!(feed_all(&[a, b]), Ok(Verdict::Go), "split at {split}");
        }
        let mut framing = Framing::default();
        for byte in &stream {
            assert_eq!(framing.feed(std::slice::from_ref(byte)), Ok(Verdict::Go));
        }
    }

    #[test]
    fn refuses_what_llhttp_refuses() {
        let bare_lf = b"POST /x HTTP/1.1\r\nX-Pad: a\nContent-Length: 0\r\n\r\n";
        assert!(feed_all(&[bare_lf]).unwrap_err().contains("bare LF"));
        let control = [CHUNKED, b"0;\x01\r\n\r\n"].concat();
        assert!(feed_all(&[&control])
            .unwrap_err()
            .contains("control character"));
        let bare_lf_size = [CHUNKED, b"0\n\r\n"].concat();
        assert!(feed_all(&[&bare_lf_size]).is_err());
        let no_crlf = [CHUNKED, b"2\r\n{}XX0\r\n\r\n"].concat();
        assert!(feed_all(&[&no_crlf]).is_err());
        let hex = [CHUNKED, b"0x5\r\n"].concat();
        assert!(feed_all(&[&hex]).is_err());
        let trailer = [CHUNKED, b"0\r\na\": [1]\r\n\r\n"].concat();
        assert!(feed_all(&[&trailer]).unwrap_err().contains("trailer"));
    }

    #[test]
    fn a_length_beside_chunked_goes_only_when_both_end_at_the_same_byte() {
        let body = b"3\r\nabc\r\n0\r\n\r\n";
        let head = |n: usize| {
            format!("POST /x HTTP/1.1\r\nContent-Length: {n}\r\nTransfer-Encoding: chunked\r\n\r\n")
        };
        let agree = [head(body.len()).as_bytes(), body].concat();
        assert_eq!(feed_all(&[&agree]), Ok(Verdict::CloseAfter));
        let (a, b) = agree.split_at(agree.len() - 3);
        assert_eq!(feed_all(&[a, b]), Ok(Verdict::CloseAfter));
        let longer = [head(body.len() + 5).as_bytes(), body].concat();
        assert!(feed_all(&[&longer]).is_err());
        let smuggling = [&agree[..], b"GET / HTTP/1.1\r\n\r\n"].concat();
        assert!(feed_all(&[&smuggling]).is_err());
        assert!(feed_all(&[&agree, b"G"]).is_err()); // anything after it, later
    }

    #[test]
    fn leaves_to_hyper_what_hyper_refuses() {
        let not_last = b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\nanything";
        assert_eq!(feed_all(&[not_last]), Ok(Verdict::Go));
        let two = b"POST /x HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nanything";
        assert_eq!(feed_all(&[two]), Ok(Verdict::Go));
    }
}

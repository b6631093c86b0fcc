//! Thaw's stub process and the server's end of its socket, on the stub's own wire
//! (runtime/python/stub/wire.py; the messages: runtime/python/stub/protocol.py).

use std::io;
use std::os::unix::io::{AsRawFd, RawFd};
use std::process::{Child, Command, Stdio};

use nix::fcntl::{fcntl, FcntlArg, FdFlag, OFlag};
use nix::sys::socket::{recv, send, socketpair, AddressFamily, MsgFlags, SockFlag, SockType};
use serde_json::{json, Value};
use tokio::io::unix::AsyncFd;

use crate::tensors::Tensor;

const MESSAGE_MAX_BYTES: usize = 160 * 1024; // wire.MESSAGE_MAX_BYTES

pub fn bad(text: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, text.to_string())
}

pub struct Fd(RawFd);

impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// A message on the stub's wire: `I` ‖ u32 LE length ‖ JSON [fields, table] ‖ inline bytes.
fn wire_message(fields: &Value, table: &[Value], inline: &[u8]) -> Vec<u8> {
    let header = serde_json::to_vec(&json!([fields, table])).expect("JSON of values");
    let mut out = Vec::with_capacity(5 + header.len() + inline.len());
    out.push(b'I');
    out.extend_from_slice(&(header.len() as u32).to_le_bytes());
    out.extend_from_slice(&header);
    out.extend_from_slice(inline);
    out
}

/// A datagram's fields, tensor table and inline bytes.
fn parse(payload: &[u8]) -> io::Result<(Value, Vec<Value>, &[u8])> {
    if payload.len() < 5 || payload[0] != b'I' {
        return Err(bad("the stub sent a message this spike does not read"));
    }
    let length = u32::from_le_bytes([payload[1], payload[2], payload[3], payload[4]]) as usize;
    if 5 + length > payload.len() {
        return Err(bad("the stub's header runs past its message"));
    }
    let header: Value = serde_json::from_slice(&payload[5..5 + length])?;
    match header {
        Value::Array(mut parts) if parts.len() == 2 => {
            let table = match parts.pop() {
                Some(Value::Array(entries)) => entries,
                _ => return Err(bad("the stub's tensor table is not a list")),
            };
            Ok((
                parts.pop().unwrap_or(Value::Null),
                table,
                &payload[5 + length..],
            ))
        }
        _ => Err(bad("the stub's header is not [fields, table]")),
    }
}

/// One stub, one execute in flight (its caller holds it behind a Mutex).
pub struct Stub {
    sock: AsyncFd<Fd>,
    next_id: u64,
    buffer: Vec<u8>,
}

impl Stub {
    /// Start `python -m runtime.python.stub.stub_main FD` and initialize the model (blocking,
    /// before anything is served).
    pub fn start(python: &str, init: &Value) -> io::Result<(Child, Stub)> {
        let (server_end, stub_end) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::empty(),
        )
        .map_err(io::Error::from)?;
        fcntl(server_end, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC)).map_err(io::Error::from)?;
        let cwd = std::env::current_dir()?;
        let pythonpath = match std::env::var("PYTHONPATH") {
            Ok(rest) if !rest.is_empty() => format!("{}:{}", cwd.display(), rest),
            _ => cwd.display().to_string(),
        };
        let child = Command::new(python)
            .args(["-m", "runtime.python.stub.stub_main", &stub_end.to_string()])
            .env("PYTHONPATH", pythonpath)
            .stdin(Stdio::null())
            .spawn()?;
        nix::unistd::close(stub_end).map_err(io::Error::from)?;
        let fields = json!({"op": "init", "model_file": init["model_file"],
                            "decoupled": init["decoupled"], "args": init["args"]});
        let message = wire_message(&fields, &[], &[]);
        send(server_end, &message, MsgFlags::empty()).map_err(io::Error::from)?;
        let mut buffer = vec![0u8; MESSAGE_MAX_BYTES];
        loop {
            let size = recv(server_end, &mut buffer, MsgFlags::empty()).map_err(io::Error::from)?;
            if size == 0 {
                return Err(bad("the stub exited before it was ready"));
            }
            let (fields, _, _) = parse(&buffer[..size])?;
            match fields["op"].as_str() {
                Some("ready") => break,
                Some("failed") => {
                    return Err(bad(&format!(
                        "the model's init failed: {}",
                        fields["error"]
                    )))
                }
                _ => continue, // a log record
            }
        }
        fcntl(server_end, FcntlArg::F_SETFL(OFlag::O_NONBLOCK)).map_err(io::Error::from)?;
        let stub = Stub {
            sock: AsyncFd::new(Fd(server_end))?,
            next_id: 0,
            buffer,
        };
        Ok((child, stub))
    }

    async fn send(&self, payload: &[u8]) -> io::Result<()> {
        loop {
            let mut guard = self.sock.writable().await?;
            match guard.try_io(|fd| {
                send(fd.get_ref().0, payload, MsgFlags::empty()).map_err(io::Error::from)
            }) {
                Ok(result) => return result.map(|_| ()),
                Err(_would_block) => continue,
            }
        }
    }

    async fn receive(&mut self) -> io::Result<usize> {
        loop {
            let mut guard = self.sock.readable().await?;
            let buffer = &mut self.buffer;
            match guard.try_io(|fd| {
                recv(fd.get_ref().0, buffer, MsgFlags::empty()).map_err(io::Error::from)
            }) {
                Ok(Ok(0)) => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "stub gone")),
                Ok(result) => return result,
                Err(_would_block) => continue,
            }
        }
    }

    /// One request through the model's `execute`: its outputs, or the error to answer.
    pub async fn execute(&mut self, model: &str, inputs: &[Tensor]) -> Result<Vec<Tensor>, String> {
        let mut table = Vec::with_capacity(inputs.len());
        let mut inline = Vec::new();
        for t in inputs {
            table.push(json!([
                t.name,
                t.datatype,
                t.shape,
                0,
                inline.len(),
                t.raw.len()
            ]));
            inline.extend_from_slice(&t.raw);
        }
        self.next_id += 1;
        let exec_id = self.next_id;
        let fields = json!({
            "op": "execute", "id": exec_id,
            "requests": [{"id": "", "model": model, "params": {}, "outputs": [],
                          "correlation_id": 0, "flags": 0, "n": inputs.len()}],
        });
        let stub_error = |exc: io::Error| format!("stub: {exc}");
        self.send(&wire_message(&fields, &table, &inline))
            .await
            .map_err(stub_error)?;
        loop {
            let size = self.receive().await.map_err(stub_error)?;
            let (fields, table, inline) = parse(&self.buffer[..size]).map_err(stub_error)?;
            if fields["op"].as_str() != Some("done") || fields["id"].as_u64() != Some(exec_id) {
                continue; // a log record or another message: not this spike's concern
            }
            if let Some(error) = fields["error"].as_str() {
                return Err(error.to_string());
            }
            if let Some(error) = fields["responses"][0]["error"].as_str() {
                return Err(error.to_string());
            }
            let mut outputs = Vec::with_capacity(table.len());
            for entry in &table {
                let at = entry[4].as_u64().unwrap_or(0) as usize;
                let nbytes = entry[5].as_u64().unwrap_or(0) as usize;
                if entry[3].as_u64() != Some(0) || at + nbytes > inline.len() {
                    return Err("an output this spike does not read (in a memfd)".to_string());
                }
                outputs.push(Tensor {
                    name: entry[0].as_str().unwrap_or("").to_string(),
                    datatype: entry[1].as_str().unwrap_or("").to_string(),
                    shape: entry[2].as_array().map_or_else(Vec::new, |dims| {
                        dims.iter().filter_map(Value::as_i64).collect()
                    }),
                    raw: inline[at..at + nbytes].to_vec(),
                });
            }
            return Ok(outputs);
        }
    }
}

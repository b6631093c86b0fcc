//! The stub's wire (runtime/python/stub/wire.py), as the front speaks it: encoding its own
//! executes, recognising the answers to them among a stub's messages, and reading those.
//!
//!     message := b"I" ‖ json_length(u32 LE) ‖ json [fields, [tensor*]] ‖ inline bytes
//!              | b"F" ‖ length(u32 LE), the rest in fd[0] (a memfd)
//!              | b"B" ‖ (length(u32 LE) ‖ message of kind b"I")*
//!     tensor  := [name, datatype, [dims], in_fd (0|1), at, nbytes]

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::os::unix::io::{FromRawFd, OwnedFd};

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::Value;

pub const INLINE_MAX_BYTES: usize = 64 * 1024;
pub const MESSAGE_MAX_BYTES: usize = 160 * 1024;
/// The front's own execute ids start here (Python's start at 1).
pub const FRONT_IDS: u64 = 1 << 40;

pub fn bad(text: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, text.into())
}

/// A tensor to send: name, datatype, shape, little-endian bytes.
#[derive(Debug)]
pub struct OutTensor {
    pub name: String,
    pub datatype: String,
    pub shape: Vec<i64>,
    pub data: Vec<u8>,
}

/// A tensor received (its bytes copied out of the datagram or memfd).
#[derive(Debug, Clone, PartialEq)]
pub struct InTensor {
    pub name: String,
    pub datatype: String,
    pub shape: Vec<i64>,
    pub data: Vec<u8>,
}

/// One message: fields and tensors.
#[derive(Debug)]
pub struct Message {
    pub fields: Value,
    pub tensors: Vec<InTensor>,
}

/// A memfd holding `data`.
pub fn memfd_with(data: &[u8], label: &str) -> io::Result<OwnedFd> {
    let name = std::ffi::CString::new(label).expect("a label without NUL");
    // SAFETY: a plain system call; the descriptor is ours.
    let raw = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: just created.
    let mut file = unsafe { File::from_raw_fd(raw) };
    file.write_all(data)?;
    Ok(OwnedFd::from(file))
}

/// The fields of an execute of one request, as the server's `_execute_message` writes them:
/// `{"op": "execute", "id", "requests": [{"id", "model", "params": {}, "outputs",
/// "correlation_id": 0, "flags": 0, "n"}]}` (written straight, without JSON values).
pub struct ExecuteFields<'a> {
    pub id: u64,
    pub request_id: &'a str,
    pub model: &'a str,
    pub outputs: &'a [&'a str],
    /// The number of inputs.
    pub n: usize,
}

/// The one request of an `ExecuteFields`.
struct OneRequest<'a>(&'a ExecuteFields<'a>);

impl Serialize for ExecuteFields<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(3))?;
        map.serialize_entry("op", "execute")?;
        map.serialize_entry("id", &self.id)?;
        map.serialize_entry("requests", &[OneRequest(self)])?;
        map.end()
    }
}

impl Serialize for OneRequest<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let fields = self.0;
        let mut map = serializer.serialize_map(Some(7))?;
        map.serialize_entry("id", fields.request_id)?;
        map.serialize_entry("model", fields.model)?;
        map.serialize_entry("params", &serde_json::Map::new())?;
        map.serialize_entry("outputs", fields.outputs)?;
        map.serialize_entry("correlation_id", &0)?;
        map.serialize_entry("flags", &0)?;
        map.serialize_entry("n", &fields.n)?;
        map.end()
    }
}

/// A datagram and the descriptors it carries.
pub struct Encoded {
    pub payload: Vec<u8>,
    pub fds: Vec<OwnedFd>,
}

/// A `tensor` of the header's table: (name, datatype, dims, in_fd, at, nbytes), which serde
/// writes as that JSON list.
type TableEntry<'a> = (&'a str, &'a str, &'a [i64], u8, usize, usize);

/// A message as wire.encode sends it: tensors inline while the inline bytes stay within
/// INLINE_MAX_BYTES, each other in its own memfd; a payload over MESSAGE_MAX_BYTES itself in a
/// memfd (kind b"F").
pub fn encode<F: Serialize + ?Sized>(fields: &F, tensors: &[OutTensor]) -> io::Result<Encoded> {
    let mut table: Vec<TableEntry> = Vec::with_capacity(tensors.len());
    let mut inline: Vec<u8> = Vec::new();
    let mut fds = Vec::new();
    for tensor in tensors {
        let n = tensor.data.len();
        let (name, datatype, shape) = (&tensor.name[..], &tensor.datatype[..], &tensor.shape[..]);
        if inline.len() + n <= INLINE_MAX_BYTES {
            table.push((name, datatype, shape, 0, inline.len(), n));
            inline.extend_from_slice(&tensor.data);
        } else {
            table.push((name, datatype, shape, 1, fds.len(), n));
            fds.push(memfd_with(&tensor.data, "thaw-tensor")?);
        }
    }
    let header = serde_json::to_vec(&(fields, &table)).map_err(|e| bad(e.to_string()))?;
    let mut payload = Vec::with_capacity(5 + header.len() + inline.len());
    payload.push(b'I');
    payload.extend_from_slice(&(header.len() as u32).to_le_bytes());
    payload.extend_from_slice(&header);
    payload.extend_from_slice(&inline);
    if payload.len() > MESSAGE_MAX_BYTES {
        let whole = memfd_with(&payload[1..], "thaw-message")?;
        let size = (payload.len() - 1) as u32;
        fds.insert(0, whole);
        payload = vec![b'F'];
        payload.extend_from_slice(&size.to_le_bytes());
    }
    Ok(Encoded { payload, fds })
}

fn u32_at(buf: &[u8], at: usize) -> io::Result<usize> {
    buf.get(at..at + 4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
        .ok_or_else(|| bad("a message is shorter than its length field"))
}

/// The bytes of an F message's memfd (fd[0]).
fn read_fd(fd: &OwnedFd, size: usize) -> io::Result<Vec<u8>> {
    let file = File::from(fd.try_clone()?);
    let mut out = vec![0u8; size];
    file.read_exact_at(&mut out, 0)?;
    Ok(out)
}

/// The sub-messages (each of kind I, with its kind byte) of a bundle's payload.
pub fn split_bundle(payload: &[u8]) -> io::Result<Vec<&[u8]>> {
    let mut at = 1;
    let mut out = Vec::new();
    while at < payload.len() {
        let length = u32_at(payload, at)?;
        at += 4;
        if length < 1 || at + length > payload.len() || payload[at] != b'I' {
            return Err(bad("a bundle holds a truncated or non-inline message"));
        }
        out.push(&payload[at..at + length]);
        at += length;
    }
    Ok(out)
}

/// The fields of a single (non-bundle) message, for routing it: of an I message from its
/// header, of an F message from its memfd's header. None for a bundle.
pub fn peek_fields(payload: &[u8], fds: &[OwnedFd]) -> io::Result<Option<Value>> {
    match payload.first() {
        Some(b'I') => {
            let (fields, _, _) = header(payload, 1)?;
            Ok(Some(fields))
        }
        Some(b'F') => {
            let fd = fds
                .first()
                .ok_or_else(|| bad("an F message without its memfd"))?;
            let file = File::from(fd.try_clone()?);
            let mut length = [0u8; 4];
            file.read_exact_at(&mut length, 0)?;
            let length = u32::from_le_bytes(length) as usize;
            let mut head = vec![0u8; length];
            file.read_exact_at(&mut head, 4)?;
            let (fields, _): (Value, Value) =
                serde_json::from_slice(&head).map_err(|e| bad(e.to_string()))?;
            Ok(Some(fields))
        }
        _ => Ok(None),
    }
}

/// Whether a message's fields answer one of the front's own executes: its exec id, if so.
pub fn front_exec(fields: &Value) -> Option<u64> {
    let id = match fields.get("op")?.as_str()? {
        "done" => fields.get("id")?.as_u64()?,
        "send" => fields.get("key")?.get(0)?.as_u64()?,
        _ => return None,
    };
    (id >= FRONT_IDS).then_some(id)
}

/// A `tensor` of a received header's table, read as the stub's wire.py writes it.
type ReadEntry = (String, String, Vec<i64>, u8, usize, usize);

/// (fields, tensor table, where the inline bytes begin) of a message body at `start`.
fn header(buf: &[u8], start: usize) -> io::Result<(Value, Vec<ReadEntry>, usize)> {
    let length = u32_at(buf, start)?;
    let end = start + 4 + length;
    let json = buf
        .get(start + 4..end)
        .ok_or_else(|| bad("a message's header runs past its end"))?;
    let (fields, table): (Value, Vec<ReadEntry>) =
        serde_json::from_slice(json).map_err(|e| bad(e.to_string()))?;
    Ok((fields, table, end))
}

/// A whole message (kind I or F, not a bundle), its tensors read; takes `fds`.
pub fn decode(payload: &[u8], fds: Vec<OwnedFd>) -> io::Result<Message> {
    match payload.first() {
        Some(b'I') => parse(payload, 1, &fds, 0),
        Some(b'F') => {
            let size = u32_at(payload, 1)?;
            let fd = fds
                .first()
                .ok_or_else(|| bad("an F message without its memfd"))?;
            let body = read_fd(fd, size)?;
            parse(&body, 0, &fds, 1)
        }
        _ => Err(bad("not a single message")),
    }
}

fn parse(buf: &[u8], start: usize, fds: &[OwnedFd], first_fd: usize) -> io::Result<Message> {
    let (fields, table, at) = header(buf, start)?;
    let mut tensors = Vec::with_capacity(table.len());
    for (name, datatype, shape, in_fd, place, nbytes) in table {
        let data = if in_fd != 0 {
            let fd = fds
                .get(first_fd + place)
                .ok_or_else(|| bad(format!("tensor {name:?} names a missing memfd")))?;
            read_fd(fd, nbytes)?
        } else {
            buf.get(at + place..at + place + nbytes)
                .ok_or_else(|| bad(format!("tensor {name:?} runs past its message")))?
                .to_vec()
        };
        tensors.push(InTensor {
            name,
            datatype,
            shape,
            data,
        });
    }
    Ok(Message { fields, tensors })
}

/// A bundle of I messages (one stays as it is).
pub fn bundle(messages: &[&[u8]]) -> Vec<u8> {
    if messages.len() == 1 {
        return messages[0].to_vec();
    }
    let mut out = vec![b'B'];
    for message in messages {
        out.extend_from_slice(&(message.len() as u32).to_le_bytes());
        out.extend_from_slice(message);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tensor(name: &str, n: usize) -> OutTensor {
        OutTensor {
            name: name.into(),
            datatype: "UINT8".into(),
            shape: vec![n as i64],
            data: vec![7u8; n],
        }
    }

    #[test]
    fn encodes_inline_memfd_and_f() {
        let fields = json!({"op": "execute", "id": FRONT_IDS});
        let small = encode(&fields, &[tensor("a", 10), tensor("b", 20)]).unwrap();
        assert_eq!(small.payload[0], b'I');
        assert!(small.fds.is_empty());
        let back = decode(&small.payload, small.fds).unwrap();
        assert_eq!(back.tensors[1].data, vec![7u8; 20]);
        assert_eq!(back.fields["op"], "execute");

        // 60 KiB inline, then 10 KiB more does not fit: a memfd.
        let mixed = encode(&fields, &[tensor("a", 60 << 10), tensor("b", 10 << 10)]).unwrap();
        assert_eq!(mixed.payload[0], b'I');
        assert_eq!(mixed.fds.len(), 1);
        let back = decode(&mixed.payload, mixed.fds).unwrap();
        assert_eq!(back.tensors[1].data.len(), 10 << 10);

        // Inline tensors and a long header (many names) past 160 KiB: an F message.
        let many: Vec<OutTensor> = (0..3000)
            .map(|i| tensor(&format!("t{i:040}"), 20))
            .collect();
        let whole = encode(&fields, &many).unwrap();
        assert_eq!(whole.payload[0], b'F');
        assert_eq!(
            peek_fields(&whole.payload, &whole.fds).unwrap().unwrap()["id"],
            FRONT_IDS
        );
        let back = decode(&whole.payload, whole.fds).unwrap();
        assert_eq!(back.tensors.len(), 3000);
    }

    #[test]
    fn writes_an_execute_s_fields_as_the_server_does() {
        let outputs = ["Y", "Z\"q"];
        let fields = ExecuteFields {
            id: FRONT_IDS + 1,
            request_id: "r\u{1}",
            model: "m",
            outputs: &outputs,
            n: 2,
        };
        let written: Value = serde_json::from_slice(&serde_json::to_vec(&fields).unwrap()).unwrap();
        let expected = json!({"op": "execute", "id": FRONT_IDS + 1, "requests": [{
            "id": "r\u{1}", "model": "m", "params": {}, "outputs": ["Y", "Z\"q"],
            "correlation_id": 0, "flags": 0, "n": 2}]});
        assert_eq!(written, expected);
        // The header: [fields, table], the table's entries as the lists `tensor` names.
        let encoded = encode(&fields, &[tensor("a", 3)]).unwrap();
        let (_, table, _) = header(&encoded.payload, 1).unwrap();
        assert_eq!(table, vec![("a".into(), "UINT8".into(), vec![3], 0, 0, 3)]);
    }

    #[test]
    fn recognises_and_splits_answers() {
        let done = encode(&json!({"op": "done", "id": FRONT_IDS + 3}), &[]).unwrap();
        let theirs = encode(&json!({"op": "done", "id": 5}), &[]).unwrap();
        let send = encode(&json!({"op": "send", "key": [FRONT_IDS, 0]}), &[]).unwrap();
        let fields = peek_fields(&done.payload, &[]).unwrap().unwrap();
        assert_eq!(front_exec(&fields), Some(FRONT_IDS + 3));
        let fields = peek_fields(&theirs.payload, &[]).unwrap().unwrap();
        assert_eq!(front_exec(&fields), None);
        let fields = peek_fields(&send.payload, &[]).unwrap().unwrap();
        assert_eq!(front_exec(&fields), Some(FRONT_IDS));
        let bundled = bundle(&[&done.payload, &theirs.payload]);
        assert_eq!(bundled[0], b'B');
        let parts = split_bundle(&bundled).unwrap();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[1], &theirs.payload[..]);
        assert!(peek_fields(&bundled, &[]).unwrap().is_none());
    }
}

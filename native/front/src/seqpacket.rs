//! An AF_UNIX SOCK_SEQPACKET socket on the event loop: one datagram per send, with its file
//! descriptors (SCM_RIGHTS), as the stub's wire and the control socket use it.

use std::io;
use std::io::{IoSlice, IoSliceMut};
use std::os::unix::io::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use nix::sys::socket::{
    recvmsg, sendmsg, shutdown, ControlMessage, ControlMessageOwned, MsgFlags, Shutdown,
};
use tokio::io::unix::AsyncFd;

/// The most descriptors one datagram carries (SCM_MAX_FD is 253).
const MAX_FDS: usize = 253;

pub struct SeqPacket {
    fd: AsyncFd<OwnedFd>,
}

/// What one read gave.
pub enum Received {
    /// A datagram of this many bytes, and its descriptors (owned).
    Datagram(usize, Vec<OwnedFd>),
    /// The peer is gone (end of stream).
    End,
    /// The peer went with datagrams of ours unread (ECONNRESET): what it wrote before is
    /// still there to read.
    Reset,
}

impl SeqPacket {
    /// Take `fd` (an inherited or received socket), made non-blocking and close-on-exec.
    pub fn new(fd: OwnedFd) -> io::Result<SeqPacket> {
        let raw = fd.as_raw_fd();
        // SAFETY: fcntl on a descriptor we own.
        unsafe {
            let flags = libc::fcntl(raw, libc::F_GETFL);
            if flags < 0 || libc::fcntl(raw, libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
                return Err(io::Error::last_os_error());
            }
            libc::fcntl(raw, libc::F_SETFD, libc::FD_CLOEXEC);
        }
        Ok(SeqPacket {
            fd: AsyncFd::new(fd)?,
        })
    }

    pub fn raw(&self) -> RawFd {
        self.fd.get_ref().as_raw_fd()
    }

    /// The next datagram into `buffer` (a truncated one is an error).
    pub async fn recv(&self, buffer: &mut [u8]) -> io::Result<Received> {
        loop {
            let mut guard = self.fd.readable().await?;
            match guard.try_io(|fd| recv_now(fd.get_ref().as_raw_fd(), buffer)) {
                Ok(result) => return result,
                Err(_would_block) => continue,
            }
        }
    }

    /// Send one datagram with `fds` (the caller closes its copies after), waiting while the
    /// peer's buffer is full.
    pub async fn send(&self, payload: &[u8], fds: &[RawFd]) -> io::Result<()> {
        loop {
            let mut guard = self.fd.writable().await?;
            match guard.try_io(|fd| send_now(fd.get_ref().as_raw_fd(), payload, fds)) {
                Ok(result) => return result,
                Err(_would_block) => continue,
            }
        }
    }

    /// End both directions now (the peer reads the end of stream; our own reads end too).
    pub fn shutdown(&self) {
        let _ = shutdown(self.raw(), Shutdown::Both);
    }
}

fn recv_now(fd: RawFd, buffer: &mut [u8]) -> io::Result<Received> {
    let mut space = nix::cmsg_space!([RawFd; MAX_FDS]);
    let mut iov = [IoSliceMut::new(buffer)];
    let message = match recvmsg::<()>(fd, &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC) {
        Ok(message) => message,
        Err(nix::errno::Errno::ECONNRESET) => return Ok(Received::Reset),
        Err(errno) => return Err(io::Error::from(errno)),
    };
    let mut fds = Vec::new();
    for cmsg in message.cmsgs() {
        if let ControlMessageOwned::ScmRights(received) = cmsg {
            // SAFETY: the kernel just gave us these descriptors.
            fds.extend(
                received
                    .into_iter()
                    .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
            );
        }
    }
    if message
        .flags
        .intersects(MsgFlags::MSG_TRUNC | MsgFlags::MSG_CTRUNC)
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "a datagram (or its descriptors) was larger than the front reads",
        ));
    }
    if message.bytes == 0 && fds.is_empty() {
        return Ok(Received::End);
    }
    Ok(Received::Datagram(message.bytes, fds))
}

fn send_now(fd: RawFd, payload: &[u8], fds: &[RawFd]) -> io::Result<()> {
    let iov = [IoSlice::new(payload)];
    let rights = [ControlMessage::ScmRights(fds)];
    let control: &[ControlMessage] = if fds.is_empty() { &[] } else { &rights };
    sendmsg::<()>(fd, &iov, control, MsgFlags::MSG_NOSIGNAL, None)
        .map(|_| ())
        .map_err(io::Error::from)
}

#[cfg(test)]
pub mod tests_support {
    use super::*;
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};

    /// A connected pair, as Python's `socket.socketpair(AF_UNIX, SOCK_SEQPACKET)`.
    pub fn pair() -> (SeqPacket, SeqPacket) {
        let (a, b) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::empty(),
        )
        .unwrap();
        // SAFETY: fresh descriptors.
        unsafe {
            (
                SeqPacket::new(OwnedFd::from_raw_fd(a)).unwrap(),
                SeqPacket::new(OwnedFd::from_raw_fd(b)).unwrap(),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::tests_support::pair;
    use super::*;

    #[tokio::test]
    async fn carries_datagrams_and_fds() {
        let (a, b) = pair();
        let (c, _d) = pair();
        a.send(b"hello", &[c.raw()]).await.unwrap();
        a.send(b"x", &[]).await.unwrap();
        let mut buffer = vec![0u8; 64];
        match b.recv(&mut buffer).await.unwrap() {
            Received::Datagram(5, fds) => assert_eq!(fds.len(), 1),
            _ => panic!("not the datagram"),
        }
        assert!(matches!(
            b.recv(&mut buffer).await.unwrap(),
            Received::Datagram(1, _)
        ));
        drop(a);
        assert!(matches!(b.recv(&mut buffer).await.unwrap(), Received::End));
    }
}

use crate::backend::GenericSocketBackend;
use crate::codec::*;
use crate::endpoint::Endpoint;
use crate::error::{ZmqError, ZmqResult};
use crate::fair_queue::FairQueue;
use crate::message::*;
use crate::transport::AcceptStopHandle;
use crate::util::PeerIdentity;
use crate::{MultiPeerBackend, SocketEvent, SocketOptions, SocketRecv, SocketSend, SocketType};
use crate::{Socket, SocketBackend};

use async_trait::async_trait;
use futures::channel::mpsc;
use futures::StreamExt;

use std::collections::HashMap;
use std::convert::{TryFrom, TryInto};
use std::sync::Arc;

pub struct RouterSocket {
    backend: Arc<GenericSocketBackend>,
    binds: HashMap<Endpoint, AcceptStopHandle>,
    fair_queue: FairQueue<ZmqFramedRead, PeerIdentity>,
}

impl Drop for RouterSocket {
    fn drop(&mut self) {
        self.backend.shutdown();
    }
}

#[async_trait]
impl Socket for RouterSocket {
    fn with_options(options: SocketOptions) -> Self {
        let mut fair_queue = FairQueue::new(true);
        let backend = Arc::new(GenericSocketBackend::with_options(
            Some(fair_queue.inner()),
            SocketType::ROUTER,
            options,
        ));

        let backend_weak = Arc::downgrade(&backend);
        fair_queue.set_on_disconnect(move |peer_id: PeerIdentity| {
            if let Some(backend) = backend_weak.upgrade() {
                backend.peer_disconnected(&peer_id);
            }
        });

        Self {
            backend,
            binds: HashMap::new(),
            fair_queue,
        }
    }

    fn backend(&self) -> Arc<dyn MultiPeerBackend> {
        self.backend.clone()
    }

    fn binds(&mut self) -> &mut HashMap<Endpoint, AcceptStopHandle> {
        &mut self.binds
    }

    fn monitor(&mut self) -> mpsc::Receiver<SocketEvent> {
        let (sender, receiver) = mpsc::channel(1024);
        self.backend.socket_monitor.lock().replace(sender);
        receiver
    }
}

#[async_trait]
impl SocketRecv for RouterSocket {
    async fn recv(&mut self) -> ZmqResult<ZmqMessage> {
        loop {
            match self.fair_queue.next().await {
                Some((peer_id, Ok(Message::Message(mut message)))) => {
                    message.push_front(peer_id.into());
                    return Ok(message);
                }
                Some((_peer_id, Ok(_msg))) => {
                    // todo: Log or handle other message types if needed
                    // We could take an approach of using `tracing` and have that be an optional feature
                    // tracing::warn!("Received unimplemented message type: {:?}", msg);
                }
                Some((peer_id, Err(e))) => {
                    refused(&self.backend, &peer_id, &e);
                    self.backend.peer_disconnected(&peer_id);
                    // We could take an approach of using `tracing` and have that be an optional feature
                    // tracing::error!("Error receiving message from peer {}: {:?}", peer_id, e);
                }
                None => {
                    // The fair queue is empty, which shouldn't happen in normal operation
                    return Err(ZmqError::NoMessage);
                }
            };
        }
    }
}

#[async_trait]
impl SocketSend for RouterSocket {
    async fn send(&mut self, mut message: ZmqMessage) -> ZmqResult<()> {
        if message.len() <= 1 {
            return Err(ZmqError::Socket(
                "ROUTER send requires at least 2 frames: identity frame + message",
            ));
        }
        let peer_id: PeerIdentity = message.pop_front().unwrap().try_into()?;
        self.backend
            .send_to_peer(&peer_id, Message::Message(message))
            .await
    }
}

impl RouterSocket {
    /// Splits the socket into separate send and recv halves, allowing concurrent
    /// sending and receiving from independent async tasks.
    ///
    /// The underlying socket stays alive until both halves are dropped.
    pub fn split(mut self) -> (RouterSendHalf, RouterRecvHalf) {
        let backend = std::mem::replace(
            &mut self.backend,
            Arc::new(GenericSocketBackend::with_options(
                None,
                SocketType::ROUTER,
                SocketOptions::default(),
            )),
        );
        let fair_queue = std::mem::replace(&mut self.fair_queue, FairQueue::new(true));
        let binds = std::mem::take(&mut self.binds);

        let inner = Arc::new(RouterSocketInner {
            backend,
            _binds: binds,
        });

        (
            RouterSendHalf {
                inner: inner.clone(),
            },
            RouterRecvHalf { inner, fair_queue },
        )
    }
}

struct RouterSocketInner {
    backend: Arc<GenericSocketBackend>,
    _binds: HashMap<Endpoint, AcceptStopHandle>,
}

impl Drop for RouterSocketInner {
    fn drop(&mut self) {
        self.backend.shutdown();
    }
}

/// The send half of a [`RouterSocket`] produced by [`RouterSocket::split`].
///
/// This half can be cloned to send from multiple async tasks concurrently.
#[derive(Clone)]
pub struct RouterSendHalf {
    inner: Arc<RouterSocketInner>,
}

/// The recv half of a [`RouterSocket`] produced by [`RouterSocket::split`].
pub struct RouterRecvHalf {
    inner: Arc<RouterSocketInner>,
    fair_queue: FairQueue<ZmqFramedRead, PeerIdentity>,
}

/// parma patch: tells the monitor that the decoder refused what `peer_id` sent (an I/O error
/// is a lost connection, not a refusal).
fn refused(backend: &GenericSocketBackend, peer_id: &PeerIdentity, e: &CodecError) {
    if matches!(e, CodecError::Io(_)) {
        return;
    }
    if let Some(monitor) = backend.monitor().lock().as_mut() {
        let _ = monitor.try_send(SocketEvent::Refused(peer_id.clone()));
    }
}

impl RouterSendHalf {
    /// parma patch: closes the connection of the peer behind `identity`, if there is one
    /// (its reader and writer are dropped; the monitor reports `Disconnected`). Whether a
    /// peer was behind it.
    pub fn disconnect(&self, identity: &[u8]) -> bool {
        let Ok(peer_id) = PeerIdentity::try_from(identity) else {
            return false;
        };
        let known = self.inner.backend.peers.contains_sync(&peer_id);
        self.inner.backend.peer_disconnected(&peer_id);
        known
    }
}

#[async_trait]
impl SocketSend for RouterSendHalf {
    async fn send(&mut self, mut message: ZmqMessage) -> ZmqResult<()> {
        if message.len() <= 1 {
            return Err(ZmqError::Socket(
                "ROUTER send requires at least 2 frames: identity frame + message",
            ));
        }
        let peer_id: PeerIdentity = message.pop_front().unwrap().try_into()?;
        self.inner
            .backend
            .send_to_peer(&peer_id, Message::Message(message))
            .await
    }
}

#[async_trait]
impl SocketRecv for RouterRecvHalf {
    async fn recv(&mut self) -> ZmqResult<ZmqMessage> {
        loop {
            match self.fair_queue.next().await {
                Some((peer_id, Ok(Message::Message(mut message)))) => {
                    message.push_front(peer_id.into());
                    return Ok(message);
                }
                Some((_peer_id, Ok(_))) => {}
                Some((peer_id, Err(e))) => {
                    refused(&self.inner.backend, &peer_id, &e);
                    self.inner.backend.peer_disconnected(&peer_id);
                }
                None => {
                    return Err(ZmqError::NoMessage);
                }
            };
        }
    }
}

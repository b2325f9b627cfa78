use std::sync::Arc;

#[cfg(all(feature = "ipc-transport", any(target_family = "unix", windows)))]
mod ipc;
#[cfg(feature = "tcp-transport")]
mod tcp;

use crate::codec::FramedIo;
use crate::endpoint::Endpoint;
use crate::task_handle::TaskHandle;
use crate::ZmqResult;

/// An already-bound transport listener that a `ZeroMQ` socket can adopt.
#[derive(Debug)]
#[non_exhaustive]
pub enum Listener {
    /// A TCP listener bound by the caller.
    #[cfg(feature = "tcp-transport")]
    Tcp(std::net::TcpListener),
    /// A Unix-domain listener bound by the caller.
    #[cfg(all(feature = "ipc-transport", target_family = "unix"))]
    Ipc(std::os::unix::net::UnixListener),
}

#[cfg(feature = "tcp-transport")]
impl From<std::net::TcpListener> for Listener {
    fn from(listener: std::net::TcpListener) -> Self {
        Self::Tcp(listener)
    }
}

#[cfg(all(feature = "ipc-transport", target_family = "unix"))]
impl From<std::os::unix::net::UnixListener> for Listener {
    fn from(listener: std::os::unix::net::UnixListener) -> Self {
        Self::Ipc(listener)
    }
}

macro_rules! do_if_enabled {
    ($feature:literal, $body:expr) => {{
        #[cfg(feature = $feature)]
        {
            $body
        }

        #[cfg(not(feature = $feature))]
        panic!("feature \"{}\" is not enabled", $feature)
    }};
}

/// Connectes to the given endpoint
///
/// # Panics
/// Panics if the requested endpoint uses a transport type that isn't enabled
pub(crate) async fn connect(
    endpoint: &Endpoint,
    options: Arc<crate::SocketOptions>,
) -> ZmqResult<(FramedIo, Endpoint)> {
    match endpoint {
        Endpoint::Tcp(_host, _port) => {
            do_if_enabled!("tcp-transport", tcp::connect(_host, *_port, options).await)
        }
        Endpoint::Ipc(_path) => {
            #[cfg(all(feature = "ipc-transport", any(target_family = "unix", windows)))]
            {
                if let Some(path) = _path {
                    ipc::connect(path, options).await
                } else {
                    Err(crate::error::ZmqError::Socket(
                        "Cannot connect to an unnamed ipc socket",
                    ))
                }
            }
            #[cfg(not(all(feature = "ipc-transport", any(target_family = "unix", windows))))]
            panic!("IPC transport is not available on this platform")
        }
    }
}

pub struct AcceptStopHandle(pub(crate) TaskHandle<()>);

/// Spawns an async task that listens for connections at the provided endpoint.
///
/// `cback` will be invoked when a connection is accepted. If the result was
/// `Ok`, it will receive a tuple containing the framed raw socket, along with
/// the endpoint of the remote connection accepted.
///
/// Returns a `ZmqResult`, which when Ok is a tuple of the resolved bound
/// endpoint, as well as a channel to stop the async accept task
///
/// # Panics
/// Panics if the requested endpoint uses a transport type that isn't enabled
pub(crate) async fn begin_accept<T>(
    endpoint: Endpoint,
    options: Arc<crate::SocketOptions>,
    cback: impl Fn(ZmqResult<(FramedIo, Endpoint)>) -> T + Send + 'static,
) -> ZmqResult<(Endpoint, AcceptStopHandle)>
where
    T: std::future::Future<Output = ()> + Send + 'static,
{
    let _cback = cback;
    match endpoint {
        Endpoint::Tcp(_host, _port) => do_if_enabled!(
            "tcp-transport",
            tcp::begin_accept(_host, _port, options, _cback).await
        ),
        Endpoint::Ipc(_path) => {
            #[cfg(all(feature = "ipc-transport", any(target_family = "unix", windows)))]
            {
                if let Some(path) = _path {
                    ipc::begin_accept(&path, options, _cback).await
                } else {
                    Err(crate::error::ZmqError::Socket(
                        "Cannot begin accepting peers at an unnamed ipc socket",
                    ))
                }
            }
            #[cfg(not(all(feature = "ipc-transport", any(target_family = "unix", windows))))]
            panic!("IPC transport is not available on this platform")
        }
    }
}

pub(crate) async fn begin_accept_listener<T>(
    listener: Listener,
    options: Arc<crate::SocketOptions>,
    cback: impl Fn(ZmqResult<(FramedIo, Endpoint)>) -> T + Send + 'static,
) -> ZmqResult<(Endpoint, AcceptStopHandle)>
where
    T: std::future::Future<Output = ()> + Send + 'static,
{
    match listener {
        #[cfg(feature = "tcp-transport")]
        Listener::Tcp(listener) => tcp::begin_accept_listener(listener, options, cback).await,
        #[cfg(all(feature = "ipc-transport", target_family = "unix"))]
        Listener::Ipc(listener) => ipc::begin_accept_listener(listener, options, cback).await,
    }
}

#[allow(unused)]
#[cfg(feature = "tokio-runtime")]
fn make_framed<T>(stream: T, options: Arc<crate::SocketOptions>) -> FramedIo
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Sync + 'static,
{
    use tokio_util::compat::TokioAsyncWriteCompatExt;
    let (read, write) = tokio::io::split(stream);
    // parma patch: the read half stays a tokio reader (see `FramedIo::new_tokio`).
    FramedIo::new_tokio(Box::new(read), Box::new(write.compat_write()), options)
}

#[allow(unused)]
#[cfg(any(feature = "async-std-runtime", feature = "async-dispatcher-runtime"))]
fn make_framed<T>(stream: T, options: Arc<crate::SocketOptions>) -> FramedIo
where
    T: futures::AsyncRead + futures::AsyncWrite + Send + Sync + 'static,
{
    use futures::AsyncReadExt;
    let (read, write) = stream.split();
    FramedIo::new(Box::new(read), Box::new(write), options)
}

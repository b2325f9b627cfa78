use crate::codec::ZmqCodec;
use crate::SocketOptions;

use super::error::{CodecError, CodecResult};
use super::Message;

use asynchronous_codec::{Decoder, FramedWrite};
use bytes::{BufMut, BytesMut};
use futures::{ready, AsyncRead, AsyncWrite, Stream};

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

// Enables us to have multiple bounds on the dyn trait in `InnerFramed`
pub trait FrameableRead: AsyncRead + Unpin + Send + Sync {}
impl<T> FrameableRead for T where T: AsyncRead + Unpin + Send + Sync {}
pub trait FrameableWrite: AsyncWrite + Unpin + Send + Sync {}
impl<T> FrameableWrite for T where T: AsyncWrite + Unpin + Send + Sync {}

/// parma patch: a tokio reader, which the framed reader reads into the spare capacity of its
/// buffers without zeroing them first (a futures reader must be given initialized bytes).
#[cfg(feature = "tokio-runtime")]
pub trait FrameableTokioRead: tokio::io::AsyncRead + Unpin + Send + Sync {}
#[cfg(feature = "tokio-runtime")]
impl<T> FrameableTokioRead for T where T: tokio::io::AsyncRead + Unpin + Send + Sync {}

/// parma patch: what a framed reader reads from.
enum Source {
    Futures(Box<dyn FrameableRead>),
    #[cfg(feature = "tokio-runtime")]
    Tokio(Box<dyn FrameableTokioRead>),
}

impl Source {
    /// One read of at most `max` (positive) bytes, appended to `buf`; `buf` is unchanged
    /// unless bytes were read.
    fn poll_read_buf(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut BytesMut,
        max: usize,
    ) -> Poll<io::Result<usize>> {
        match self {
            Source::Futures(r) => {
                let start = buf.len();
                buf.resize(start + max, 0);
                let res = Pin::new(r).poll_read(cx, &mut buf[start..]);
                let n = match res {
                    Poll::Ready(Ok(n)) => n,
                    _ => 0,
                };
                buf.truncate(start + n);
                res
            }
            #[cfg(feature = "tokio-runtime")]
            Source::Tokio(r) => {
                buf.reserve(max);
                let mut limited = (&mut *buf).limit(max);
                tokio_util::io::poll_read_buf(Pin::new(r), cx, &mut limited)
            }
        }
    }
}

pub(crate) type ZmqFramedWrite = asynchronous_codec::FramedWrite<Box<dyn FrameableWrite>, ZmqCodec>;

/// ZMTP framed reader with an adaptive read chunk.
///
/// Starts with a small read chunk and grows only when the transport keeps
/// filling the requested space. This avoids a large default allocation while
/// still reducing read/poll loops for large receive bursts. Short-read
/// recovery reduces initialization and allocation traffic after a burst ends.
pub struct ZmqFramedRead {
    inner: Source,
    codec: ZmqCodec,
    buffer: BytesMut,
    read_chunk_size: usize,
    // Configuration is shared; adaptation state belongs to this connection.
    options: Arc<SocketOptions>,
    short_reads: usize,
    // parma patch: the body of a large frame being read into storage of its own (what of it
    // has arrived), its length (0 when none is being read), and whether the last frame had
    // such a body.
    body: BytesMut,
    body_len: usize,
    after_large: bool,
}

/// parma patch: the most the reader asks for right after a large body, when the next bytes
/// are most likely the following frame's header and the start of another large body that would
/// be copied out of the read buffer.
const READ_AFTER_LARGE: usize = 8 * 1024;

impl ZmqFramedRead {
    pub(crate) fn new(inner: Box<dyn FrameableRead>, options: Arc<SocketOptions>) -> Self {
        Self::with_source(Source::Futures(inner), options)
    }

    /// parma patch: a reader of a tokio stream, read without zeroing the buffers first.
    #[cfg(feature = "tokio-runtime")]
    pub(crate) fn new_tokio(
        inner: Box<dyn FrameableTokioRead>,
        options: Arc<SocketOptions>,
    ) -> Self {
        Self::with_source(Source::Tokio(inner), options)
    }

    fn with_source(inner: Source, options: Arc<SocketOptions>) -> Self {
        Self {
            inner,
            codec: ZmqCodec::with_options(&options),
            buffer: BytesMut::with_capacity(options.read_buffer_initial_size),
            read_chunk_size: options.read_buffer_initial_size,
            options,
            short_reads: 0,
            body: BytesMut::new(),
            body_len: 0,
            after_large: false,
        }
    }

    fn poll_read_into_buffer(
        &mut self,
        cx: &mut Context<'_>,
        min_read_size: usize,
    ) -> Poll<io::Result<usize>> {
        let mut read_size = self
            .read_chunk_size
            .max(min_read_size)
            .min(self.options.read_buffer_max_size);
        // parma patch: a short read right after a large body, outside the chunk's adaptation.
        let capped = self.after_large && read_size > READ_AFTER_LARGE;
        if capped {
            read_size = READ_AFTER_LARGE.max(min_read_size.min(read_size));
        }

        // The read goes straight into the buffer (no scratch buffer, no second copy); a
        // futures reader's slice is zeroed first, a tokio reader's is not (parma patch).
        // The decoder checks frame length + maximum chunk size at the wire
        // boundary, so preparing this slice cannot overflow its length.
        match self.inner.poll_read_buf(cx, &mut self.buffer, read_size) {
            Poll::Ready(Ok(bytes_read)) => {
                if capped {
                    self.after_large = false;
                    return Poll::Ready(Ok(bytes_read));
                }
                if bytes_read >= read_size
                    && self.read_chunk_size < self.options.read_buffer_max_size
                {
                    self.read_chunk_size =
                        (self.read_chunk_size * 2).min(self.options.read_buffer_max_size);
                }
                if bytes_read > 0 && bytes_read < self.read_chunk_size / 2 {
                    self.short_reads += 1;
                    if self.short_reads == self.options.read_buffer_short_reads {
                        // Confirm short reads before shrinking: an isolated burst tail
                        // otherwise makes the next batch repeatedly grow and shrink.
                        // Leave room above the observation without increasing the chunk.
                        self.read_chunk_size = (bytes_read.next_power_of_two() * 2)
                            .max(self.options.read_buffer_initial_size * 2)
                            .min(self.read_chunk_size);
                        self.short_reads = 0;
                    }
                } else if bytes_read > 0 {
                    self.short_reads = 0;
                }
                Poll::Ready(Ok(bytes_read))
            }
            Poll::Ready(Err(error)) => Poll::Ready(Err(error)),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Stream for ZmqFramedRead {
    type Item = CodecResult<Message>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        // parma patch: whether the buffer was decoded since it last changed (after a read
        // that completed nothing), so the loop's top does not decode it again.
        let mut decoded = false;

        loop {
            // Consume buffered data first; read from the socket only when the
            // current buffer cannot produce a full message.
            if this.body_len == 0 {
                if !decoded {
                    if let Some(item) = this.codec.decode(&mut this.buffer)? {
                        return Poll::Ready(Some(Ok(item)));
                    }
                }
                decoded = false;
                // parma patch: a large body goes into storage of its own, sized to it, which
                // the message then owns alone. In the read buffer it would keep that buffer
                // shared while the receiver holds the message, so the reads behind it would
                // copy it out, or allocate and fault in fresh pages, again and again. What of
                // it has arrived is copied over; the rest is read straight into place.
                if let Some(len) = this.codec.large_body_pending() {
                    let mut body = BytesMut::with_capacity(len);
                    body.extend_from_slice(&this.buffer);
                    this.buffer.clear();
                    this.body = body;
                    this.body_len = len;
                }
            }
            if this.body_len > 0 {
                while this.body.len() < this.body_len {
                    let want = this.body_len - this.body.len();
                    let n = ready!(this.inner.poll_read_buf(cx, &mut this.body, want))?;
                    if n == 0 {
                        return Poll::Ready(Some(Err(CodecError::Io(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "bytes remaining in stream",
                        )))));
                    }
                }
                let body = std::mem::take(&mut this.body);
                this.body_len = 0;
                this.after_large = true;
                match this.codec.take_body(body)? {
                    Some(item) => return Poll::Ready(Some(Ok(item))),
                    None => continue,
                }
            }

            let min_read_size = this.codec.bytes_needed(this.buffer.len());
            let n = ready!(this.poll_read_into_buffer(cx, min_read_size))?;
            let ended = n == 0;
            match this.codec.decode(&mut this.buffer)? {
                Some(item) => return Poll::Ready(Some(Ok(item))),
                None if ended => {
                    // Give the decoder one final chance at EOF; leftover bytes
                    // mean the stream ended with a truncated frame.
                    if this.buffer.is_empty() {
                        return Poll::Ready(None);
                    }
                    match this.codec.decode_eof(&mut this.buffer)? {
                        Some(item) => return Poll::Ready(Some(Ok(item))),
                        None if this.buffer.is_empty() => return Poll::Ready(None),
                        None => {
                            return Poll::Ready(Some(Err(CodecError::Io(io::Error::new(
                                io::ErrorKind::UnexpectedEof,
                                "bytes remaining in stream",
                            )))));
                        }
                    }
                }
                // The read may have completed the header of a large frame: the loop's top
                // takes its body (without decoding the same bytes again).
                None => decoded = true,
            }
        }
    }
}

/// Equivalent to [`asynchronous_codec::Framed<T, ZmqCodec>`]
pub struct FramedIo {
    pub read_half: ZmqFramedRead,
    pub write_half: ZmqFramedWrite,
}

impl FramedIo {
    pub fn new(
        read_half: Box<dyn FrameableRead>,
        write_half: Box<dyn FrameableWrite>,
        options: Arc<SocketOptions>,
    ) -> Self {
        let read_half = ZmqFramedRead::new(read_half, options);
        let write_half = FramedWrite::new(write_half, ZmqCodec::new());
        Self {
            read_half,
            write_half,
        }
    }

    /// parma patch: [`FramedIo::new`] of a tokio stream's halves, read without zeroing the
    /// read buffers first.
    #[cfg(feature = "tokio-runtime")]
    pub fn new_tokio(
        read_half: Box<dyn FrameableTokioRead>,
        write_half: Box<dyn FrameableWrite>,
        options: Arc<SocketOptions>,
    ) -> Self {
        Self {
            read_half: ZmqFramedRead::new_tokio(read_half, options),
            write_half: FramedWrite::new(write_half, ZmqCodec::new()),
        }
    }

    pub fn into_parts(self) -> (ZmqFramedRead, ZmqFramedWrite) {
        (self.read_half, self.write_half)
    }
}

#[cfg(test)]
mod tests {
    mod read_buffer;
    mod socket_options;

    use super::*;
    use crate::async_rt;
    use crate::codec::ZmqGreeting;

    use bytes::{Bytes, BytesMut};
    use futures::StreamExt;
    use futures::{io::Cursor, AsyncRead};
    use std::io::ErrorKind;
    use std::sync::{Arc, Mutex};

    const INITIAL_READ_CHUNK_SIZE: usize = 128;
    const MAX_READ_CHUNK_SIZE: usize = 64 * 1024;

    struct RecordingReader {
        input: Vec<u8>,
        position: usize,
        requested_sizes: Arc<Mutex<Vec<usize>>>,
    }

    impl RecordingReader {
        fn new(input: Vec<u8>, requested_sizes: Arc<Mutex<Vec<usize>>>) -> Self {
            Self {
                input,
                position: 0,
                requested_sizes,
            }
        }
    }

    impl AsyncRead for RecordingReader {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
            buffer: &mut [u8],
        ) -> Poll<io::Result<usize>> {
            self.requested_sizes.lock().unwrap().push(buffer.len());

            let remaining = self.input.len() - self.position;
            if remaining == 0 {
                return Poll::Ready(Ok(0));
            }

            let bytes_read = remaining.min(buffer.len());
            let end = self.position + bytes_read;
            buffer[..bytes_read].copy_from_slice(&self.input[self.position..end]);
            self.position = end;

            Poll::Ready(Ok(bytes_read))
        }
    }

    fn encoded_stream(frames: &[&[u8]]) -> Vec<u8> {
        let mut bytes = BytesMut::from(ZmqGreeting::default());
        for frame in frames {
            if frame.len() > u8::MAX as usize {
                bytes.extend_from_slice(&[0b0000_0010]);
                bytes.extend_from_slice(&(frame.len() as u64).to_be_bytes());
            } else {
                bytes.extend_from_slice(&[0, frame.len() as u8]);
            }
            bytes.extend_from_slice(frame);
        }
        bytes.to_vec()
    }

    #[async_rt::test]
    async fn test_zmq_framed_read_yields_buffered_messages_before_reading_more() {
        let input = encoded_stream(&[b"first", b"second"]);
        let mut reader = ZmqFramedRead::new(
            Box::new(Cursor::new(input)),
            Arc::new(SocketOptions::default()),
        );

        assert!(matches!(
            reader.next().await,
            Some(Ok(Message::Greeting(_)))
        ));

        let first = reader
            .next()
            .await
            .expect("first message")
            .expect("decode first");
        let Message::Message(first) = first else {
            panic!("unexpected first frame type");
        };
        assert_eq!(first.get(0), Some(&Bytes::from_static(b"first")));

        let second = reader
            .next()
            .await
            .expect("second message")
            .expect("decode second");
        let Message::Message(second) = second else {
            panic!("unexpected second frame type");
        };
        assert_eq!(second.get(0), Some(&Bytes::from_static(b"second")));

        assert!(reader.next().await.is_none());
    }

    #[async_rt::test]
    async fn test_zmq_framed_read_reports_truncated_frame_at_eof() {
        let mut input = BytesMut::from(ZmqGreeting::default()).to_vec();
        input.extend_from_slice(&[0, 5, b'a']);
        let mut reader = ZmqFramedRead::new(
            Box::new(Cursor::new(input)),
            Arc::new(SocketOptions::default()),
        );

        assert!(matches!(
            reader.next().await,
            Some(Ok(Message::Greeting(_)))
        ));

        let error = reader
            .next()
            .await
            .expect("truncated frame should produce an item")
            .expect_err("truncated frame should fail");
        match error {
            CodecError::Io(error) => assert_eq!(error.kind(), ErrorKind::UnexpectedEof),
            other => panic!("unexpected error type: {other:?}"),
        }
    }

    #[async_rt::test]
    async fn test_zmq_framed_read_uses_decoder_demand_after_full_reads() {
        let frame = vec![b'a'; 600];
        let requested_sizes = Arc::new(Mutex::new(Vec::new()));
        let input = encoded_stream(&[&frame]);
        let input_len = input.len();
        let mut reader = ZmqFramedRead::new(
            Box::new(RecordingReader::new(input, Arc::clone(&requested_sizes))),
            Arc::new(SocketOptions::default()),
        );

        assert!(matches!(
            reader.next().await,
            Some(Ok(Message::Greeting(_)))
        ));

        let message = reader
            .next()
            .await
            .expect("message")
            .expect("decode message");
        let Message::Message(message) = message else {
            panic!("unexpected message type");
        };
        assert_eq!(message.get(0), Some(&Bytes::copy_from_slice(&frame)));

        let greeting_len = BytesMut::from(ZmqGreeting::default()).len();
        let encoded_frame_len = input_len - greeting_len;
        let initial_prefetched_frame_bytes = INITIAL_READ_CHUNK_SIZE - greeting_len;
        let remaining_frame_bytes = encoded_frame_len - initial_prefetched_frame_bytes;
        assert_eq!(
            *requested_sizes.lock().unwrap(),
            vec![INITIAL_READ_CHUNK_SIZE, remaining_frame_bytes]
        );
    }
}

//! Bounded channels between subtasks and the input gate that reads several of them.
//!
//! A channel is bounded twice: by messages and by bytes. A sender waits for both before a
//! batch is queued; that wait is backpressure, and it is timed. The byte permit travels with
//! the batch and is released when the receiver drops it, so the bytes a channel holds never
//! exceed its `capacity_bytes` (a single batch larger than the whole capacity takes all of it).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use arrow::record_batch::RecordBatch;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

/// A checkpoint barrier. A final barrier ends the stream: nothing follows it, and tasks exit
/// once its checkpoint is complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Barrier {
    pub checkpoint_id: u64,
    pub is_final: bool,
}

#[derive(Debug)]
pub enum Message {
    Data(RecordBatch, ChannelPermit),
    Barrier(Barrier),
    /// No more data will follow on this channel; a final barrier still will.
    EndOfData,
}

/// Bytes of one queued batch, returned to the channel (and subtracted from the global
/// buffered-bytes gauge) when dropped.
#[derive(Debug)]
pub struct ChannelPermit {
    _permit: Option<OwnedSemaphorePermit>,
    bytes: u64,
    gauge: Arc<BufferGauge>,
}

impl Drop for ChannelPermit {
    fn drop(&mut self) {
        self.gauge.current.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// Bytes held in all channels of a job right now, and the most ever held.
#[derive(Debug, Default)]
pub struct BufferGauge {
    current: AtomicU64,
    peak: AtomicU64,
}

impl BufferGauge {
    pub fn current_bytes(&self) -> u64 {
        self.current.load(Ordering::Relaxed)
    }
    pub fn peak_bytes(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }
    fn add(&self, bytes: u64) {
        let now = self.current.fetch_add(bytes, Ordering::Relaxed) + bytes;
        self.peak.fetch_max(now, Ordering::Relaxed);
    }
}

#[derive(Debug, Clone, Copy)]
pub struct ChannelConfig {
    pub capacity_messages: usize,
    pub capacity_bytes: u64,
}

impl Default for ChannelConfig {
    fn default() -> Self {
        ChannelConfig {
            capacity_messages: 64,
            capacity_bytes: 16 * 1024 * 1024,
        }
    }
}

#[derive(Clone)]
pub struct ChannelSender {
    tx: mpsc::Sender<Message>,
    bytes: Arc<Semaphore>,
    capacity_bytes: u64,
    gauge: Arc<BufferGauge>,
}

/// The receiving side was dropped: the downstream task has ended (its attempt is over).
#[derive(Debug)]
pub struct Disconnected;

impl ChannelSender {
    pub async fn send_batch(&self, batch: RecordBatch) -> Result<(), Disconnected> {
        let bytes = (batch.get_array_memory_size() as u64).clamp(1, self.capacity_bytes);
        // Semaphore permits are u32; capacity_bytes is capped accordingly in `channel`.
        let permit = self
            .bytes
            .clone()
            .acquire_many_owned(bytes as u32)
            .await
            .map_err(|_| Disconnected)?;
        self.gauge.add(bytes);
        let permit = ChannelPermit {
            _permit: Some(permit),
            bytes,
            gauge: self.gauge.clone(),
        };
        self.tx
            .send(Message::Data(batch, permit))
            .await
            .map_err(|_| Disconnected)
    }

    pub async fn send_control(&self, message: Message) -> Result<(), Disconnected> {
        debug_assert!(!matches!(message, Message::Data(..)));
        self.tx.send(message).await.map_err(|_| Disconnected)
    }
}

pub fn channel(
    config: ChannelConfig,
    gauge: Arc<BufferGauge>,
) -> (ChannelSender, mpsc::Receiver<Message>) {
    let capacity_bytes = config.capacity_bytes.clamp(1, u32::MAX as u64 / 2);
    let (tx, rx) = mpsc::channel(config.capacity_messages.max(1));
    let sender = ChannelSender {
        tx,
        bytes: Arc::new(Semaphore::new(capacity_bytes as usize)),
        capacity_bytes,
        gauge,
    };
    (sender, rx)
}

/// The input channels of one subtask. During barrier alignment some channels are blocked:
/// their messages stay queued (and their senders feel backpressure) until unblocked.
pub struct InputGate {
    channels: Vec<GateChannel>,
    next_poll: usize,
}

struct GateChannel {
    rx: mpsc::Receiver<Message>,
    /// Which incoming edge of the vertex this channel belongs to.
    input: usize,
    blocked: bool,
    closed: bool,
}

impl InputGate {
    pub fn new(channels: Vec<(usize, mpsc::Receiver<Message>)>) -> Self {
        let channels = channels
            .into_iter()
            .map(|(input, rx)| GateChannel {
                rx,
                input,
                blocked: false,
                closed: false,
            })
            .collect();
        InputGate {
            channels,
            next_poll: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.channels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.channels.is_empty()
    }

    pub fn input_of(&self, channel: usize) -> usize {
        self.channels[channel].input
    }

    pub fn block(&mut self, channel: usize) {
        self.channels[channel].blocked = true;
    }

    pub fn unblock_all(&mut self) {
        for c in &mut self.channels {
            c.blocked = false;
        }
    }

    /// The next message from any unblocked channel, as `(channel, message)`; `None` once every
    /// unblocked channel's sender is gone. Polls round-robin so a fast input cannot starve a slow
    /// one. Cancel-safe: a message is only taken when it is returned.
    pub async fn next(&mut self) -> Option<(usize, Message)> {
        std::future::poll_fn(|cx| self.poll_next(cx)).await
    }

    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<(usize, Message)>> {
        let n = self.channels.len();
        let mut open = 0;
        for step in 0..n {
            let i = (self.next_poll + step) % n;
            let c = &mut self.channels[i];
            if c.blocked || c.closed {
                continue;
            }
            match c.rx.poll_recv(cx) {
                Poll::Ready(Some(m)) => {
                    self.next_poll = (i + 1) % n;
                    return Poll::Ready(Some((i, m)));
                }
                Poll::Ready(None) => c.closed = true,
                Poll::Pending => open += 1,
            }
        }
        let any_blocked = self.channels.iter().any(|c| c.blocked && !c.closed);
        if open == 0 && !any_blocked {
            Poll::Ready(None)
        } else {
            Poll::Pending
        }
    }
}

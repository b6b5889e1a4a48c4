//! The open ScanKv sessions (Fluss 1.0): each reads one primary-key bucket through a
//! point-in-time view of its kv tablet, a batch per request, resuming after the last key it
//! returned. Bounded as Fluss bounds them: [`PER_BUCKET_MAX`] sessions on one bucket and
//! [`PER_SERVER_MAX`] in all, each expiring [`TTL`] after its last request (an expired session's
//! id is remembered for another TTL, so its client is told it expired rather than unknown). A
//! session pins its view's data until it ends, expires or is closed.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::storage::KvView;

/// Sessions on one bucket at once (Fluss's `kv.scanner.max-per-bucket`).
pub const PER_BUCKET_MAX: usize = 8;
/// Sessions on the server at once (Fluss's `kv.scanner.max-per-server`).
pub const PER_SERVER_MAX: usize = 200;
/// Idle time after which a session ends (Fluss's `kv.scanner.ttl`).
pub const TTL: Duration = Duration::from_secs(600);

/// The bucket a session reads: table id, partition id, bucket id.
pub type BucketOf = (i64, Option<i64>, i32);

/// One scan in progress.
pub struct Session {
    pub bucket: BucketOf,
    pub view: KvView,
    /// The last key returned; the next batch starts after it.
    pub last_key: Option<Vec<u8>>,
    /// Rows the scan may still return; `None`: unlimited.
    pub remaining: Option<u64>,
    /// The `call_seq_id` of the last request answered (-1 before the first).
    pub last_seq: i32,
}

#[derive(Default)]
struct State {
    open: HashMap<Vec<u8>, Entry>,
    /// Ids of sessions that expired, with when, for a while.
    expired: HashMap<Vec<u8>, Instant>,
}

struct Entry {
    /// `None` while a request reads it (one in flight per session).
    session: Option<Session>,
    bucket: BucketOf,
    last_used: Instant,
}

/// Why a session could not be taken.
#[derive(Debug, PartialEq, Eq)]
pub enum TakeError {
    Unknown,
    Expired,
    Busy,
}

#[derive(Default)]
pub struct KvScanners {
    state: Mutex<State>,
}

impl KvScanners {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Ends sessions idle past [`TTL`] (and forgets ids expired for longer).
    fn sweep(state: &mut State, now: Instant) {
        let idle: Vec<Vec<u8>> = state
            .open
            .iter()
            .filter(|(_, e)| e.session.is_some() && now.duration_since(e.last_used) > TTL)
            .map(|(id, _)| id.clone())
            .collect();
        for id in idle {
            state.open.remove(&id);
            state.expired.insert(id, now);
        }
        state.expired.retain(|_, at| now.duration_since(*at) <= TTL);
    }

    /// Registers `session` under a new id; an error says which bound it would pass.
    pub fn open(&self, session: Session) -> Result<Vec<u8>, String> {
        let now = Instant::now();
        let mut state = self.lock();
        Self::sweep(&mut state, now);
        let on_bucket = state
            .open
            .values()
            .filter(|e| e.bucket == session.bucket)
            .count();
        if on_bucket >= PER_BUCKET_MAX {
            return Err(format!(
                "Cannot create scanner for bucket {:?}: per-bucket limit of {PER_BUCKET_MAX} reached.",
                session.bucket
            ));
        }
        if state.open.len() >= PER_SERVER_MAX {
            return Err(format!(
                "Cannot create scanner for bucket {:?}: server-wide limit of {PER_SERVER_MAX} reached.",
                session.bucket
            ));
        }
        // 128 random bits as 32 hex digits, as Fluss spells its ids (a UUID without dashes).
        let id: String = rand::random::<[u8; 16]>()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let id = id.into_bytes();
        state.open.insert(
            id.clone(),
            Entry {
                bucket: session.bucket,
                session: Some(session),
                last_used: now,
            },
        );
        Ok(id)
    }

    /// Takes the session `id` for one request; [`KvScanners::put_back`] or
    /// [`KvScanners::close`] returns it.
    pub fn take(&self, id: &[u8]) -> Result<Session, TakeError> {
        let now = Instant::now();
        let mut state = self.lock();
        Self::sweep(&mut state, now);
        let expired = state.expired.contains_key(id);
        match state.open.get_mut(id) {
            Some(entry) => entry.session.take().ok_or(TakeError::Busy),
            None if expired => Err(TakeError::Expired),
            None => Err(TakeError::Unknown),
        }
    }

    /// Returns a session taken by [`KvScanners::take`] after a request that did not end it.
    pub fn put_back(&self, id: &[u8], session: Session) {
        if let Some(entry) = self.lock().open.get_mut(id) {
            entry.session = Some(session);
            entry.last_used = Instant::now();
        }
    }

    /// Ends session `id` (its view is released); whether it existed.
    pub fn close(&self, id: &[u8]) -> bool {
        self.lock().open.remove(id).is_some()
    }

    /// Ends every session of table `table_id` (dropped).
    pub fn close_table(&self, table_id: i64) {
        self.lock().open.retain(|_, e| e.bucket.0 != table_id);
    }
}

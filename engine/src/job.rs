//! Running a job: the job manager, one job's lifecycle (attempts, restarts, cancel, stop) and
//! the checkpoint coordinator inside each attempt.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

use crate::channel::{Barrier, BufferGauge, ChannelConfig, InputGate, channel};
use crate::checkpoint::{CheckpointMetadata, CheckpointStorage, CompletedCheckpoint};
use crate::error::{Error, Result};
use crate::graph::{JobGraph, VertexKind};
use crate::metrics::{CheckpointStats, JobMetrics, VertexCounters, snapshot_vertex};
use crate::operator::{RestoredState, TaskContext};
use crate::output::Output;
use crate::output::Partitioning;
use crate::task::{Control, TaskEnv, TaskEvent, run_operator, run_source};

/// Control messages a task may have queued at once; one checkpoint is in flight at a time,
/// so a handful is plenty.
const CONTROL_CAPACITY: usize = 16;
/// Restart attempts are capped even when a strategy asks for more.
const RESTART_ATTEMPTS_LIMIT: u32 = 10_000;

#[derive(Debug, Clone)]
pub struct CheckpointConfig {
    /// Periodic trigger; `None` takes only the final checkpoint (end of input or stop).
    pub interval: Option<Duration>,
    pub timeout: Duration,
    /// Complete checkpoints to keep; older ones are deleted.
    pub retained_max: usize,
    /// Consecutive failed (timed out) checkpoints tolerated before the attempt fails.
    pub failures_tolerated_max: u32,
    pub storage: Arc<dyn CheckpointStorage>,
}

impl CheckpointConfig {
    pub fn new(storage: Arc<dyn CheckpointStorage>) -> Self {
        CheckpointConfig {
            interval: Some(Duration::from_secs(10)),
            timeout: Duration::from_secs(120),
            retained_max: 3,
            failures_tolerated_max: 3,
            storage,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum RestartStrategy {
    None,
    FixedDelay {
        delay: Duration,
        attempts_max: u32,
    },
    ExponentialBackoff {
        initial: Duration,
        max: Duration,
        multiplier: f64,
        attempts_max: u32,
    },
}

impl RestartStrategy {
    /// The wait before restart number `restart` (1-based), or `None` when out of attempts.
    pub fn delay(&self, restart: u32) -> Option<Duration> {
        match *self {
            RestartStrategy::None => None,
            RestartStrategy::FixedDelay {
                delay,
                attempts_max,
            } => (restart <= attempts_max.min(RESTART_ATTEMPTS_LIMIT)).then_some(delay),
            RestartStrategy::ExponentialBackoff {
                initial,
                max,
                multiplier,
                attempts_max,
            } => {
                if restart > attempts_max.min(RESTART_ATTEMPTS_LIMIT) {
                    return None;
                }
                let factor = multiplier
                    .max(1.0)
                    .powi(restart.saturating_sub(1).min(64) as i32);
                Some(initial.mul_f64(factor).min(max))
            }
        }
    }
}

#[derive(Debug, Clone)]
pub struct JobConfig {
    pub name: String,
    pub checkpoint: CheckpointConfig,
    pub restart: RestartStrategy,
    pub channel: ChannelConfig,
}

impl JobConfig {
    pub fn new(name: impl Into<String>, storage: Arc<dyn CheckpointStorage>) -> Self {
        JobConfig {
            name: name.into(),
            checkpoint: CheckpointConfig::new(storage),
            restart: RestartStrategy::FixedDelay {
                delay: Duration::from_secs(1),
                attempts_max: 10,
            },
            channel: ChannelConfig::default(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobState {
    Created,
    Running,
    Restarting,
    Finished,
    Cancelled,
    Failed(Failure),
}

/// Why a job failed: the error's text, with its causes, and who can fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub message: String,
    pub cause: crate::Cause,
}

impl Failure {
    fn of(error: &Error) -> Self {
        Failure {
            message: error.to_string(),
            cause: error.cause(),
        }
    }
}

impl JobState {
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            JobState::Finished | JobState::Cancelled | JobState::Failed(_)
        )
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JobState::Created => write!(f, "created"),
            JobState::Running => write!(f, "running"),
            JobState::Restarting => write!(f, "restarting"),
            JobState::Finished => write!(f, "finished"),
            JobState::Cancelled => write!(f, "cancelled"),
            JobState::Failed(_) => write!(f, "failed"),
        }
    }
}

enum Command {
    Cancel,
    Stop(oneshot::Sender<Result<u64>>),
}

/// Completed checkpoints kept per job for metrics (older ones are only counted).
pub const CHECKPOINT_HISTORY_MAX: usize = 100;

/// What the job's tasks and coordinator share with the handle.
struct Shared {
    counters: Vec<Arc<VertexCounters>>,
    /// The most recent completed checkpoints, at most [`CHECKPOINT_HISTORY_MAX`]: a job at a
    /// 1 s interval completes 86,400 a day.
    checkpoints: Mutex<std::collections::VecDeque<CheckpointStats>>,
    checkpoints_completed: std::sync::atomic::AtomicU64,
    checkpoints_failed: Mutex<u64>,
    restarts: Mutex<u32>,
    gauge: Arc<BufferGauge>,
    /// Checkpoint ids are never reused, not even those of checkpoints that failed: external
    /// systems may have seen them.
    next_checkpoint_id: Mutex<u64>,
}

/// A running (or ended) job. Cheap to clone.
#[derive(Clone)]
pub struct JobHandle {
    name: String,
    graph: Arc<JobGraph>,
    state: watch::Receiver<JobState>,
    commands: mpsc::Sender<Command>,
    shared: Arc<Shared>,
}

impl JobHandle {
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn state(&self) -> JobState {
        self.state.borrow().clone()
    }

    /// Cancels the job: tasks are dropped where they are; nothing is checkpointed.
    pub async fn cancel(&self) {
        let _ = self.commands.send(Command::Cancel).await;
        self.wait().await;
    }

    /// Stops the job with a final checkpoint and returns its id once it is complete and every
    /// task has been notified. The job then ends as finished.
    pub async fn stop(&self) -> Result<u64> {
        let (tx, rx) = oneshot::channel();
        let not_running = || Error::NotRunning {
            job: self.name.clone(),
            state: self.state().to_string(),
            action: "stop",
        };
        self.commands
            .send(Command::Stop(tx))
            .await
            .map_err(|_| not_running())?;
        let id = rx.await.map_err(|_| not_running())??;
        self.wait().await;
        Ok(id)
    }

    /// Waits until the job reaches a terminal state and returns it.
    pub async fn wait(&self) -> JobState {
        let mut state = self.state.clone();
        loop {
            let current = state.borrow_and_update().clone();
            if current.is_terminal() {
                return current;
            }
            if state.changed().await.is_err() {
                return self.state();
            }
        }
    }

    /// Waits until at least `n` checkpoints completed (in this run of the job), up to `timeout`.
    pub async fn wait_for_checkpoints(&self, n: usize, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self
                .shared
                .checkpoints_completed
                .load(std::sync::atomic::Ordering::Relaxed)
                >= n as u64
            {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        false
    }

    pub fn metrics(&self) -> JobMetrics {
        let operators = self
            .graph
            .vertices()
            .iter()
            .map(|v| snapshot_vertex(&v.name, v.parallelism, &self.shared.counters[v.id.0]))
            .collect();
        JobMetrics {
            operators,
            checkpoints: self
                .shared
                .checkpoints
                .lock()
                .unwrap()
                .iter()
                .cloned()
                .collect(),
            checkpoints_completed: self
                .shared
                .checkpoints_completed
                .load(std::sync::atomic::Ordering::Relaxed),
            checkpoints_failed: *self.shared.checkpoints_failed.lock().unwrap(),
            restarts: *self.shared.restarts.lock().unwrap(),
            buffered_bytes: self.shared.gauge.current_bytes(),
            buffered_bytes_peak: self.shared.gauge.peak_bytes(),
        }
    }
}

/// Starts jobs and keeps their handles.
#[derive(Default, Clone)]
pub struct JobManager {
    jobs: Arc<Mutex<Vec<JobHandle>>>,
}

impl JobManager {
    pub fn new() -> Self {
        Self::default()
    }

    /// Validates the graph and starts the job on the current tokio runtime.
    pub fn submit(&self, graph: JobGraph, config: JobConfig) -> Result<JobHandle> {
        graph.validate()?;
        let graph = Arc::new(graph);
        let (state_tx, state_rx) = watch::channel(JobState::Created);
        let (commands_tx, commands_rx) = mpsc::channel(8);
        let shared = Arc::new(Shared {
            counters: graph.vertices().iter().map(|_| Arc::default()).collect(),
            checkpoints: Mutex::default(),
            checkpoints_completed: std::sync::atomic::AtomicU64::new(0),
            checkpoints_failed: Mutex::new(0),
            restarts: Mutex::new(0),
            gauge: Arc::default(),
            next_checkpoint_id: Mutex::new(1),
        });
        let handle = JobHandle {
            name: config.name.clone(),
            graph: graph.clone(),
            state: state_rx,
            commands: commands_tx,
            shared: shared.clone(),
        };
        tokio::spawn(run_job(graph, config, shared, state_tx, commands_rx));
        self.jobs.lock().unwrap().push(handle.clone());
        Ok(handle)
    }

    pub fn jobs(&self) -> Vec<JobHandle> {
        self.jobs.lock().unwrap().clone()
    }
}

enum AttemptEnd {
    Finished,
    Stopped,
    Cancelled,
    Failed(Error),
}

async fn run_job(
    graph: Arc<JobGraph>,
    config: JobConfig,
    shared: Arc<Shared>,
    state: watch::Sender<JobState>,
    mut commands: mpsc::Receiver<Command>,
) {
    // Failures since the job last made progress: an attempt that completed a checkpoint resets
    // the count, so a long-lived job is judged by its recent failures, not its lifetime's.
    let mut attempt = 0u32;
    loop {
        let restored = match latest_checkpoint(config.checkpoint.storage.as_ref(), &shared).await {
            Ok(restored) => restored,
            Err(e) => {
                let _ = state.send(JobState::Failed(Failure {
                    message: format!("cannot read checkpoints: {e}"),
                    cause: e.cause(),
                }));
                return;
            }
        };
        if let Some(c) = &restored {
            info!(job = %config.name, checkpoint = c.metadata.checkpoint_id, attempt, "restoring");
        }
        let _ = state.send(JobState::Running);
        let completed_before = shared
            .checkpoints_completed
            .load(std::sync::atomic::Ordering::Relaxed);
        let end = run_attempt(&graph, &config, &shared, restored, attempt, &mut commands).await;
        match end {
            AttemptEnd::Finished | AttemptEnd::Stopped => {
                let _ = state.send(JobState::Finished);
                return;
            }
            AttemptEnd::Cancelled => {
                let _ = state.send(JobState::Cancelled);
                return;
            }
            AttemptEnd::Failed(error) => {
                let progressed = shared
                    .checkpoints_completed
                    .load(std::sync::atomic::Ordering::Relaxed)
                    > completed_before;
                if progressed {
                    attempt = 0;
                }
                attempt += 1;
                let Some(delay) = config.restart.delay(attempt) else {
                    warn!(job = %config.name, %error, "job failed; no restarts left");
                    let failed = Error::RestartsExhausted {
                        attempts: attempt,
                        last: Box::new(error),
                    };
                    let _ = state.send(JobState::Failed(Failure::of(&failed)));
                    return;
                };
                warn!(job = %config.name, %error, attempt, ?delay, "job failed; restarting");
                *shared.restarts.lock().unwrap() += 1;
                let _ = state.send(JobState::Restarting);
                if !wait_to_restart(delay, &mut commands, &config.name).await {
                    let _ = state.send(JobState::Cancelled);
                    return;
                }
            }
        }
    }
}

/// The latest complete checkpoint, to restore. New checkpoint ids continue after every
/// checkpoint that has a directory, complete or not, so no id is written twice.
async fn latest_checkpoint(
    storage: &dyn CheckpointStorage,
    shared: &Shared,
) -> Result<Option<CompletedCheckpoint>> {
    let restored = storage.latest().await?;
    let all = storage.all_checkpoints().await?;
    let mut next = shared.next_checkpoint_id.lock().unwrap();
    *next = (*next).max(all.last().map_or(1, |id| id + 1));
    Ok(restored)
}

/// Waits out the delay before a restart; false when a stop or a cancel came meanwhile, which
/// cancels the job (a stop is answered that the job is not running).
async fn wait_to_restart(
    delay: Duration,
    commands: &mut mpsc::Receiver<Command>,
    job: &str,
) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(delay) => true,
        command = commands.recv() => {
            if let Some(Command::Stop(reply)) = command {
                let _ = reply.send(Err(Error::NotRunning {
                    job: job.to_string(),
                    state: "restarting".into(),
                    action: "stop",
                }));
            }
            false
        }
    }
}

/// The checkpoint being taken.
struct Pending {
    barrier: Barrier,
    started: Instant,
    acks: HashMap<(usize, u32), (Bytes, Duration)>,
}

/// Runs one attempt: builds every subtask, then coordinates checkpoints until the job ends,
/// is cancelled or stopped, or a task fails.
async fn run_attempt(
    graph: &JobGraph,
    config: &JobConfig,
    shared: &Shared,
    restored: Option<CompletedCheckpoint>,
    attempt: u32,
    commands: &mut mpsc::Receiver<Command>,
) -> AttemptEnd {
    let (events_tx, mut events) = mpsc::channel(1024);
    let mut tasks = JoinSet::new();
    let deployed = deploy(
        graph,
        config,
        shared,
        restored.as_ref(),
        attempt,
        events_tx,
        &mut tasks,
    );
    let (source_controls, all_controls) = match deployed {
        Ok(controls) => controls,
        Err(e) => return AttemptEnd::Failed(e),
    };
    let mut coordinator = Coordinator::new(config, shared, source_controls, all_controls);
    let source_count = coordinator.source_controls.len();
    let mut tick = checkpoint_ticks(config);
    let mut stop_reply: Option<oneshot::Sender<Result<u64>>> = None;

    let end = loop {
        let timeout_at = coordinator
            .pending
            .as_ref()
            .map(|p| tokio::time::Instant::from_std(p.started + config.checkpoint.timeout));
        tokio::select! {
            joined = tasks.join_next() => match joined {
                None => break if coordinator.final_requested == Some(FinalReason::Stop) { AttemptEnd::Stopped } else { AttemptEnd::Finished },
                Some(Ok(Ok(()))) => {}
                Some(Ok(Err(e))) => break AttemptEnd::Failed(e),
                Some(Err(join)) => break AttemptEnd::Failed(Error::Internal(format!("a task panicked: {join}"))),
            },
            event = events.recv() => match event {
                Some(TaskEvent::Ack { checkpoint_id, vertex, subtask, state, snapshot_time }) => {
                    if let Err(e) = coordinator.on_ack(graph, checkpoint_id, vertex, subtask, state, snapshot_time).await {
                        break AttemptEnd::Failed(e);
                    }
                    if let Some(id) = coordinator.final_done
                        && let Some(reply) = stop_reply.take()
                    {
                        let _ = reply.send(Ok(id));
                    }
                }
                Some(TaskEvent::SourceEnded) => coordinator.sources_ended += 1,
                Some(TaskEvent::BacklogRead) => coordinator.backlog_read = tick.is_some(),
                None => {}
            },
            command = commands.recv() => match command {
                Some(Command::Cancel) | None => break AttemptEnd::Cancelled,
                Some(Command::Stop(reply)) => coordinator.on_stop(reply, &mut stop_reply),
            },
            _ = async { tick.as_mut().unwrap().tick().await }, if tick.is_some() && coordinator.pending.is_none() && coordinator.final_requested.is_none() => {
                if let Err(e) = coordinator.trigger(false).await {
                    break AttemptEnd::Failed(e);
                }
            },
            // A source read its backlog: checkpoint now, and the next periodic one an
            // interval after this.
            _ = std::future::ready(()), if coordinator.backlog_read && coordinator.pending.is_none() && coordinator.final_requested.is_none() => {
                if let Err(e) = coordinator.trigger(false).await {
                    break AttemptEnd::Failed(e);
                }
                if let Some(tick) = tick.as_mut() {
                    tick.reset();
                }
            },
            _ = async { tokio::time::sleep_until(timeout_at.unwrap()).await }, if timeout_at.is_some() => {
                if let Err(e) = coordinator.on_timeout() {
                    if let Some(reply) = stop_reply.take() {
                        let _ = reply.send(Err(Error::Internal(e.to_string())));
                    }
                    break AttemptEnd::Failed(e);
                }
            },
        }
        if let Err(e) = coordinator.trigger_final_when_due(source_count).await {
            break AttemptEnd::Failed(e);
        }
    };
    tasks.shutdown().await;
    if let (AttemptEnd::Failed(e), Some(reply)) = (&end, stop_reply.take()) {
        let _ = reply.send(Err(Error::Internal(format!("stop failed: {e}"))));
    }
    end
}

/// Periodic checkpoints, the first one interval after the start; a late tick is delayed, not
/// made up. `None` when the job takes no periodic checkpoints.
fn checkpoint_ticks(config: &JobConfig) -> Option<tokio::time::Interval> {
    config.checkpoint.interval.map(|every| {
        let mut t = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        t
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FinalReason {
    EndOfInput,
    Stop,
}

struct Coordinator<'a> {
    config: &'a JobConfig,
    shared: &'a Shared,
    source_controls: Vec<mpsc::Sender<Control>>,
    all_controls: Vec<mpsc::Sender<Control>>,
    task_count: usize,
    next_id: u64,
    pending: Option<Pending>,
    consecutive_failures: u32,
    sources_ended: usize,
    /// A source read its backlog since the last checkpoint was triggered: one is due now.
    backlog_read: bool,
    final_requested: Option<FinalReason>,
    /// The id of the final checkpoint once it is complete.
    final_done: Option<u64>,
}

impl<'a> Coordinator<'a> {
    /// The coordinator of one attempt; checkpoint ids go on from the job's last one.
    fn new(
        config: &'a JobConfig,
        shared: &'a Shared,
        source_controls: Vec<mpsc::Sender<Control>>,
        all_controls: Vec<mpsc::Sender<Control>>,
    ) -> Self {
        Coordinator {
            config,
            shared,
            task_count: all_controls.len(),
            source_controls,
            all_controls,
            next_id: *shared.next_checkpoint_id.lock().unwrap(),
            pending: None,
            consecutive_failures: 0,
            sources_ended: 0,
            backlog_read: false,
            final_requested: None,
            final_done: None,
        }
    }

    /// A stop request: the final checkpoint is requested, and `reply` waits in `stop_reply`
    /// for it to complete. A job already stopping or ending refuses the request.
    fn on_stop(
        &mut self,
        reply: oneshot::Sender<Result<u64>>,
        stop_reply: &mut Option<oneshot::Sender<Result<u64>>>,
    ) {
        if self.final_requested.is_some() {
            let _ = reply.send(Err(Error::NotRunning {
                job: self.config.name.clone(),
                state: "stopping".into(),
                action: "stop",
            }));
        } else {
            self.final_requested = Some(FinalReason::Stop);
            *stop_reply = Some(reply);
        }
    }

    /// Once all `source_count` sources ended, the final checkpoint is requested; once one is
    /// requested and no checkpoint is in flight, it is triggered.
    async fn trigger_final_when_due(&mut self, source_count: usize) -> Result<()> {
        if self.final_requested.is_none() && source_count > 0 && self.sources_ended == source_count
        {
            self.final_requested = Some(FinalReason::EndOfInput);
        }
        if self.final_requested.is_some() && self.pending.is_none() && self.final_done.is_none() {
            self.trigger(true).await?;
        }
        Ok(())
    }

    async fn trigger(&mut self, is_final: bool) -> Result<()> {
        debug_assert!(self.pending.is_none(), "one checkpoint in flight at a time");
        let barrier = Barrier {
            checkpoint_id: self.next_id,
            is_final,
        };
        self.next_id += 1;
        debug!(job = %self.config.name, checkpoint = barrier.checkpoint_id, is_final, backlog_read = self.backlog_read, "checkpoint triggered");
        self.backlog_read = false;
        *self.shared.next_checkpoint_id.lock().unwrap() = self.next_id;
        self.pending = Some(Pending {
            barrier,
            started: Instant::now(),
            acks: HashMap::new(),
        });
        for control in &self.source_controls {
            // A source that already exited (it cannot before its final checkpoint) is a bug.
            control.send(Control::Trigger(barrier)).await.map_err(|_| {
                Error::Internal("a source task is gone before its final checkpoint".into())
            })?;
        }
        Ok(())
    }

    async fn on_ack(
        &mut self,
        graph: &JobGraph,
        checkpoint_id: u64,
        vertex: usize,
        subtask: u32,
        state: Bytes,
        snapshot_time: Duration,
    ) -> Result<()> {
        let Some(pending) = self.pending.as_mut() else {
            return Ok(()); // A straggler of an aborted checkpoint.
        };
        if pending.barrier.checkpoint_id != checkpoint_id {
            return Ok(());
        }
        if pending
            .acks
            .insert((vertex, subtask), (state, snapshot_time))
            .is_some()
        {
            return Err(Error::Internal(format!(
                "checkpoint {checkpoint_id}: vertex {vertex} subtask {subtask} acknowledged twice"
            )));
        }
        if pending.acks.len() < self.task_count {
            return Ok(());
        }
        let pending = self.pending.take().expect("checked above");
        self.complete(graph, pending).await
    }

    /// Every subtask acknowledged: persist the states, then the metadata (the commit point),
    /// then tell every task.
    async fn complete(&mut self, graph: &JobGraph, pending: Pending) -> Result<()> {
        let id = pending.barrier.checkpoint_id;
        let storage = &self.config.checkpoint.storage;
        let mut handles = Vec::with_capacity(pending.acks.len());
        let mut size_bytes = 0u64;
        let mut per_vertex: HashMap<usize, (u64, Duration)> = HashMap::new();
        for ((vertex, subtask), (state, snapshot_time)) in pending.acks {
            let v = graph.vertex(crate::graph::VertexId(vertex));
            size_bytes += state.len() as u64;
            let entry = per_vertex.entry(vertex).or_default();
            entry.0 += state.len() as u64;
            entry.1 = entry.1.max(snapshot_time);
            handles.push(
                storage
                    .write_state(id, &v.name, subtask, v.parallelism, state)
                    .await?,
            );
        }
        handles.sort_by(|a, b| (&a.vertex, a.subtask).cmp(&(&b.vertex, b.subtask)));
        let metadata = CheckpointMetadata {
            checkpoint_id: id,
            job_name: self.config.name.clone(),
            created_at_ms: now_ms(),
            is_final: pending.barrier.is_final,
            states: handles,
        };
        storage.write_metadata(&metadata).await?;
        for (vertex, (bytes, time)) in per_vertex {
            let c = &self.shared.counters[vertex];
            c.last_checkpoint_bytes
                .store(bytes, std::sync::atomic::Ordering::Relaxed);
            c.last_snapshot_ns
                .store(time.as_nanos() as u64, std::sync::atomic::Ordering::Relaxed);
        }
        {
            let mut history = self.shared.checkpoints.lock().unwrap();
            if history.len() == CHECKPOINT_HISTORY_MAX {
                history.pop_front();
            }
            history.push_back(CheckpointStats {
                checkpoint_id: id,
                duration_ms: pending.started.elapsed().as_millis() as u64,
                size_bytes,
                completed_at_ms: metadata.created_at_ms,
                is_final: metadata.is_final,
            });
        }
        self.shared
            .checkpoints_completed
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        debug!(job = %self.config.name, checkpoint = id, took = ?pending.started.elapsed(), "checkpoint complete");
        self.consecutive_failures = 0;
        if pending.barrier.is_final {
            self.final_done = Some(id);
        }
        for control in &self.all_controls {
            // Tasks that already exited no longer care; a full queue means the task will see
            // a later completion, which covers this one.
            let _ = control.try_send(Control::Complete(id));
        }
        self.retain(id).await;
        Ok(())
    }

    /// Deletes complete checkpoints beyond the retained count and incomplete ones older than
    /// the newest complete one. Failures here cost disk, not correctness: log and go on.
    async fn retain(&self, newest: u64) {
        let storage = &self.config.checkpoint.storage;
        let result: Result<()> = async {
            let complete = storage.complete_checkpoints().await?;
            let keep = self.config.checkpoint.retained_max.max(1);
            let mut discard: Vec<u64> = complete.iter().rev().skip(keep).copied().collect();
            for id in storage.all_checkpoints().await? {
                if id < newest && !complete.contains(&id) {
                    discard.push(id);
                }
            }
            for id in discard {
                storage.discard(id).await?;
            }
            Ok(())
        }
        .await;
        if let Err(e) = result {
            warn!(job = %self.config.name, error = %e, "could not delete old checkpoints");
        }
    }

    fn on_timeout(&mut self) -> Result<()> {
        let pending = self
            .pending
            .take()
            .expect("the timeout arm runs only with a pending checkpoint");
        *self.shared.checkpoints_failed.lock().unwrap() += 1;
        self.consecutive_failures += 1;
        let error = Error::CheckpointTimeout {
            checkpoint_id: pending.barrier.checkpoint_id,
            timeout: self.config.checkpoint.timeout,
        };
        if pending.barrier.is_final
            || self.consecutive_failures > self.config.checkpoint.failures_tolerated_max
        {
            return Err(error);
        }
        warn!(job = %self.config.name, %error, "checkpoint aborted");
        Ok(())
    }
}

use silt_rt::clock::now_ms;

type Controls = (Vec<mpsc::Sender<Control>>, Vec<mpsc::Sender<Control>>);

/// Each subtask's input channels, by `(vertex, subtask)`, with the input index they feed.
type Inputs = HashMap<(usize, u32), Vec<(usize, mpsc::Receiver<crate::channel::Message>)>>;

/// Builds the channels of every edge: each subtask's inputs, and each subtask's output with a
/// sender to every subtask downstream of it (only the one of its index across a forward edge).
fn wire(
    graph: &JobGraph,
    config: &JobConfig,
    shared: &Shared,
) -> (Inputs, HashMap<(usize, u32), Output>) {
    let mut inputs: Inputs = HashMap::new();
    let mut outputs: HashMap<(usize, u32), Output> = HashMap::new();
    for v in graph.vertices() {
        for i in 0..v.parallelism {
            outputs.insert((v.id.0, i), Output::new(shared.counters[v.id.0].clone()));
        }
    }
    for v in graph.vertices() {
        for (input, edge) in graph.inputs(v.id).into_iter().enumerate() {
            let upstream = graph.vertex(edge.from);
            for j in 0..upstream.parallelism {
                let targets: Vec<u32> = match edge.partitioning {
                    Partitioning::Forward => vec![j],
                    _ => (0..v.parallelism).collect(),
                };
                let senders = targets
                    .into_iter()
                    .map(|i| {
                        let (tx, rx) = channel(config.channel, shared.gauge.clone());
                        inputs.entry((v.id.0, i)).or_default().push((input, rx));
                        tx
                    })
                    .collect();
                outputs
                    .get_mut(&(upstream.id.0, j))
                    .expect("every subtask has an output")
                    .add_edge(edge.partitioning.clone(), senders);
            }
        }
    }
    (inputs, outputs)
}

/// Creates channels, instances and tasks for every subtask of the graph. Returns the control
/// senders of the source tasks and of all tasks.
fn deploy(
    graph: &JobGraph,
    config: &JobConfig,
    shared: &Shared,
    restored: Option<&CompletedCheckpoint>,
    attempt: u32,
    events: mpsc::Sender<TaskEvent>,
    tasks: &mut JoinSet<Result<()>>,
) -> Result<Controls> {
    let (mut inputs, mut outputs) = wire(graph, config, shared);
    let mut source_controls = Vec::new();
    let mut all_controls = Vec::new();
    for v in graph.vertices() {
        let subtask_states = restored
            .map(|c| c.vertex_states(&v.name))
            .unwrap_or_default();
        for i in 0..v.parallelism {
            let ctx = TaskContext {
                job_name: config.name.clone(),
                vertex_name: v.name.clone(),
                subtask_index: i,
                parallelism: v.parallelism,
                attempt,
            };
            let (control_tx, control_rx) = mpsc::channel(CONTROL_CAPACITY);
            let env = TaskEnv {
                ctx: ctx.clone(),
                vertex: v.id.0,
                restored: RestoredState {
                    checkpoint_id: restored.map(|c| c.metadata.checkpoint_id),
                    subtask_states: subtask_states.clone(),
                    subtask_index: i,
                },
                output: outputs.remove(&(v.id.0, i)).expect("built above"),
                control: control_rx,
                events: events.clone(),
                counters: shared.counters[v.id.0].clone(),
            };
            all_controls.push(control_tx.clone());
            match &v.kind {
                VertexKind::Source(factory) => {
                    let source = factory.create(&ctx)?;
                    source_controls.push(control_tx);
                    tasks.spawn(run_source(source, env));
                }
                VertexKind::Operator(factory) => {
                    let operator = factory.create(&ctx)?;
                    let gate = InputGate::new(inputs.remove(&(v.id.0, i)).unwrap_or_default());
                    tasks.spawn(run_operator(operator, env, gate));
                }
            }
        }
    }
    Ok((source_controls, all_controls))
}

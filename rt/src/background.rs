//! One low-priority thread for work that is worth doing but must not compete with the data
//! path: a lake's small-file compaction, which decodes and re-encodes Parquet for about a
//! second per run.
//!
//! On two cores such a rewrite, run as an ordinary task, took a core from the writers and the
//! committer while they closed a checkpoint's files, and commits of the next checkpoints were
//! skipped (p99 freshness at 250 ms checkpoints rose from about 0.65 s to 0.76 s in the runs
//! where a rewrite overlapped a barrier). Here the work runs on a thread with a raised nice
//! value (10, as RocksDB lowers its compaction threads), so the kernel gives it what the data
//! path leaves idle and little else; on an idle machine it runs at full speed.
//!
//! The thread runs a current-thread tokio runtime for the lifetime of the process, so futures
//! that do I/O through tokio (an object store's HTTP client) can run there, and connections they
//! open stay valid. At most [`QUEUED_MAX`] futures wait or run; beyond that [`Background::spawn`]
//! refuses, and the caller does the work later or not at all.

use std::future::Future;
use std::sync::OnceLock;

use futures::FutureExt as _;
use futures::future::{AbortHandle, Abortable};
use tokio::sync::{mpsc, oneshot};
use tracing::warn;

/// Futures waiting or running on the background thread, at most.
pub const QUEUED_MAX: usize = 64;

/// The nice value of the background thread (0 is the process's; 19 the lowest priority).
const NICE: i32 = 10;

type Job = std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;

/// The process's low-priority thread; started at first use.
pub fn background() -> &'static Background {
    static BACKGROUND: OnceLock<Background> = OnceLock::new();
    BACKGROUND.get_or_init(Background::start)
}

/// See the module docs.
#[derive(Debug)]
pub struct Background {
    /// `None` when the thread could not be started: every spawn is then refused.
    jobs: Option<mpsc::Sender<Job>>,
}

/// A future running on the background thread: its output once done. Dropping it aborts the
/// future at its next await.
#[derive(Debug)]
pub struct BackgroundTask<T> {
    output: oneshot::Receiver<T>,
    abort: AbortHandle,
}

impl Background {
    fn start() -> Background {
        let (jobs, mut queue) = mpsc::channel::<Job>(QUEUED_MAX);
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime,
            Err(e) => {
                warn!(error = %e, "no runtime for the background thread; background work is skipped");
                return Background { jobs: None };
            }
        };
        let started = std::thread::Builder::new()
            .name("silt-background".into())
            .spawn(move || {
                lower_priority();
                runtime.block_on(async move {
                    while let Some(job) = queue.recv().await {
                        tokio::spawn(job);
                    }
                });
            });
        match started {
            Ok(_) => Background { jobs: Some(jobs) },
            Err(e) => {
                warn!(error = %e, "could not start the background thread; background work is skipped");
                Background { jobs: None }
            }
        }
    }

    /// Runs `future` on the background thread, or `None` when [`QUEUED_MAX`] futures already
    /// wait or run there (or the thread could not be started).
    pub fn spawn<F>(&self, future: F) -> Option<BackgroundTask<F::Output>>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let (done, output) = oneshot::channel();
        let (abort, registration) = AbortHandle::new_pair();
        let job = async move {
            let _ = done.send(future.await);
        };
        let job: Job = Box::pin(Abortable::new(job, registration).map(drop));
        self.jobs.as_ref()?.try_send(job).ok()?;
        Some(BackgroundTask { output, abort })
    }
}

impl<T> BackgroundTask<T> {
    /// The output if the future is done; `Err(self)` while it runs. `Ok(None)`: it ended
    /// without an output (it panicked or was aborted).
    pub fn try_take(mut self) -> Result<Option<T>, Self> {
        match self.output.try_recv() {
            Ok(value) => Ok(Some(value)),
            Err(oneshot::error::TryRecvError::Empty) => Err(self),
            Err(oneshot::error::TryRecvError::Closed) => Ok(None),
        }
    }

    /// Waits for the output; `None` if the future ended without one.
    pub async fn join(mut self) -> Option<T> {
        (&mut self.output).await.ok()
    }
}

impl<T> Drop for BackgroundTask<T> {
    fn drop(&mut self) {
        // A no-op once the future is done.
        self.abort.abort();
    }
}

/// Raises the calling thread's nice value (Linux: the nice value is per thread).
fn lower_priority() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: gettid has no preconditions; setpriority only reads its arguments. Raising
        // one's own nice value needs no privilege.
        let rc =
            unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, NICE) };
        if rc != 0 {
            warn!(
                error = %std::io::Error::last_os_error(),
                "could not lower the background thread's priority; it runs at the normal one"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn runs_a_future_and_hands_back_its_output() {
        let task = background()
            .spawn(async {
                tokio::time::sleep(Duration::from_millis(10)).await;
                42
            })
            .expect("room in the queue");
        assert_eq!(task.join().await, Some(42));
    }

    #[tokio::test]
    async fn try_take_says_running_until_done() {
        let (go, wait) = oneshot::channel::<()>();
        let task = background()
            .spawn(async move {
                let _ = wait.await;
                7
            })
            .unwrap();
        let task = task.try_take().expect_err("still running");
        go.send(()).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let mut task = task;
        loop {
            match task.try_take() {
                Ok(output) => {
                    assert_eq!(output, Some(7));
                    break;
                }
                Err(running) => task = running,
            }
            assert!(std::time::Instant::now() < deadline, "never finished");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn a_panicking_future_ends_without_an_output() {
        let task = background()
            .spawn(async { panic!("boom in the background") })
            .unwrap();
        let output: Option<()> = task.join().await;
        assert_eq!(output, None);
    }

    #[test]
    fn the_thread_runs_at_a_lower_priority() {
        #[cfg(target_os = "linux")]
        {
            let (tx, rx) = std::sync::mpsc::channel();
            let rt = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            rt.block_on(async {
                let task = background()
                    .spawn(async move {
                        // SAFETY: getpriority reads only its arguments.
                        let nice = unsafe {
                            libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t)
                        };
                        tx.send(nice).unwrap();
                    })
                    .unwrap();
                task.join().await;
            });
            assert_eq!(rx.recv().unwrap(), NICE);
        }
    }
}

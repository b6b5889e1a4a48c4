//! A small, fixed set of named threads for blocking file I/O, apart from tokio's blocking pool.
//!
//! tokio's blocking pool grows a thread for every blocking task that finds the others busy and
//! keeps an idle one for ten seconds after its last task. Under a steady stream of short tasks
//! (the hot store's group-commit fsyncs, the lake's file reads and writes) every thread it ever
//! grew finds work within those ten seconds, so the pool stays at its peak for good, each
//! thread with its own allocator cache and stack. Worse, a blocking task that waits for another
//! blocking task (deltalake loads each deletion vector in a blocking task that waits for an
//! object-store read, which is itself a blocking task on a local disk) deadlocks a bounded pool.
//!
//! [`IoThreads`] runs such work on its own threads instead: a fixed number, started once, fed
//! through a queue of bounded length. A job that runs here has no tokio runtime in its context,
//! so code that would hand its blocking part to the runtime's pool runs it in place.

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, OnceLock, mpsc};

use tokio::sync::{Semaphore, oneshot};

type Job = Box<dyn FnOnce() + Send>;

/// The process's threads for file I/O: local lakes' object stores and checkpoint writes.
pub fn files() -> &'static IoThreads {
    static FILES: OnceLock<IoThreads> = OnceLock::new();
    FILES.get_or_init(|| IoThreads::start("silt-io", 8, 4096))
}

/// Named threads that run blocking jobs for async callers. See the module docs.
pub struct IoThreads {
    name: &'static str,
    started: usize,
    jobs: Mutex<mpsc::Sender<Job>>,
    /// Jobs queued or running at most; a further caller waits for a place.
    places: Semaphore,
}

impl std::fmt::Debug for IoThreads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IoThreads")
            .field("name", &self.name)
            .field("started", &self.started)
            .finish_non_exhaustive()
    }
}

impl IoThreads {
    /// Starts `threads` threads named `<name>-<n>`, with at most `queued_max` jobs waiting or
    /// running. Where no thread can be started, [`IoThreads::run`] falls back to tokio's
    /// blocking pool (and says so once, in the log).
    pub fn start(name: &'static str, threads: usize, queued_max: usize) -> IoThreads {
        let (jobs, queue) = mpsc::channel::<Job>();
        let queue = Arc::new(Mutex::new(queue));
        let mut started = 0;
        for n in 0..threads.max(1) {
            let queue = queue.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("{name}-{n}"))
                .spawn(move || {
                    loop {
                        let job = queue.lock().unwrap_or_else(|p| p.into_inner()).recv();
                        let Ok(job) = job else { return };
                        // A job that panics drops its reply, which its caller sees as an error.
                        let _ = std::panic::catch_unwind(AssertUnwindSafe(job));
                    }
                });
            match spawned {
                Ok(_) => started += 1,
                Err(e) => tracing::error!("could not start I/O thread {name}-{n}: {e}"),
            }
        }
        IoThreads {
            name,
            started,
            jobs: Mutex::new(jobs),
            places: Semaphore::new(queued_max.max(1)),
        }
    }

    /// Runs `job` on one of the threads and returns what it returned. Waits for a place in the
    /// queue first when it is full.
    pub async fn run<T, F>(&self, job: F) -> std::io::Result<T>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        if self.started == 0 {
            return tokio::task::spawn_blocking(job)
                .await
                .map_err(std::io::Error::other);
        }
        let _place = self.places.acquire().await.map_err(std::io::Error::other)?;
        let (reply, result) = oneshot::channel();
        let job: Job = Box::new(move || {
            let _ = reply.send(job());
        });
        self.jobs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .send(job)
            .map_err(|_| {
                std::io::Error::other(format!("the {} threads have stopped", self.name))
            })?;
        result.await.map_err(|_| {
            std::io::Error::other(format!("a job on the {} threads panicked", self.name))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn jobs_run_on_the_named_threads_outside_the_runtime() {
        let threads = IoThreads::start("silt-test-io", 2, 4);
        let (name, in_runtime) = threads
            .run(|| {
                (
                    std::thread::current().name().map(str::to_string),
                    tokio::runtime::Handle::try_current().is_ok(),
                )
            })
            .await
            .unwrap();
        assert!(name.unwrap().starts_with("silt-test-io-"));
        assert!(!in_runtime, "a job must not see the runtime");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_full_queue_makes_callers_wait_and_a_panic_is_an_error() {
        let threads = Arc::new(IoThreads::start("silt-test-io", 1, 2));
        let (release, gate) = std::sync::mpsc::channel::<()>();
        let gate = Arc::new(Mutex::new(gate));
        let mut held = Vec::new();
        for _ in 0..2 {
            let threads = threads.clone();
            let gate = gate.clone();
            held.push(tokio::spawn(async move {
                threads
                    .run(move || gate.lock().unwrap().recv().unwrap())
                    .await
            }));
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert_eq!(
            threads.places.available_permits(),
            0,
            "both places are taken"
        );
        let third = {
            let threads = threads.clone();
            tokio::spawn(async move { threads.run(|| 3).await })
        };
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!third.is_finished(), "a third job waits for a place");
        release.send(()).unwrap();
        release.send(()).unwrap();
        for h in held {
            h.await.unwrap().unwrap();
        }
        assert_eq!(third.await.unwrap().unwrap(), 3);
        let panicked = threads.run(|| panic!("boom")).await;
        assert!(panicked.unwrap_err().to_string().contains("panicked"));
        assert_eq!(
            threads.run(|| 4).await.unwrap(),
            4,
            "the thread survives a panic"
        );
    }
}

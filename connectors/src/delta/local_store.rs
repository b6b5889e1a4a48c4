//! The object store of local (`file://`) lakes: `object_store`'s `LocalFileSystem`, with every
//! file operation run on silt's I/O threads ([`silt_rt::io_threads::files`]) instead of
//! tokio's blocking pool.
//!
//! `LocalFileSystem` hands each read, write, listing chunk and delete to the runtime's blocking
//! pool. deltalake loads every deletion vector of a scan in a blocking task of its own that
//! waits for such a read: one query over a primary-key lake of a hundred files with vectors
//! held two hundred pool threads, a pool bounded below that deadlocked, and the steady trickle
//! of lake I/O from tiering kept every thread the pool had grown alive (each with its own
//! allocator cache; the soak's resident memory grew with them). Run on the I/O threads, where no
//! runtime is in context, `LocalFileSystem` does its blocking work in place, and a blocking task
//! waiting for a read no longer needs a second pool thread.

use std::fmt;
use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use deltalake::DeltaResult;
use deltalake::logstore::{ObjectStoreFactory, ObjectStoreRef, StorageConfig};
use futures::StreamExt as _;
use futures::executor::block_on;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, GetResultPayload, ListResult, MultipartUpload, ObjectMeta,
    ObjectStore, PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, UploadPart,
};
use silt_rt::io_threads::{IoThreads, files};
use url::Url;

/// Bytes a read of an object's content takes per job on the I/O threads.
const READ_CHUNK_BYTES: u64 = 8 << 20;

/// Entries a listing takes per job on the I/O threads.
const LIST_CHUNK: usize = 1000;

/// Deletes of one delete stream in flight at once (`LocalFileSystem`'s own figure).
const DELETES_IN_FLIGHT: usize = 10;

const STORE: &str = "LocalLakeStore";

/// The `file://` store factory deltalake uses for silt's lakes.
#[derive(Debug, Default)]
pub struct LocalLakeStoreFactory;

impl ObjectStoreFactory for LocalLakeStoreFactory {
    fn parse_url_opts(
        &self,
        url: &Url,
        config: &StorageConfig,
    ) -> DeltaResult<(ObjectStoreRef, Path)> {
        let (store, path) = object_store::parse_url_opts(url, &config.raw)?;
        Ok((Arc::new(LocalLakeStore::new(Arc::from(store))), path))
    }
}

/// Makes `ctx` read `file://` URLs through a [`LocalLakeStore`]: deltalake's scans read each
/// deletion vector by its absolute `file://` URL from the session's object stores, where
/// DataFusion registers a plain `LocalFileSystem` by default.
pub fn read_local_files_on_io_threads(ctx: &datafusion::prelude::SessionContext) {
    static STORE: std::sync::OnceLock<Arc<dyn ObjectStore>> = std::sync::OnceLock::new();
    let store = STORE.get_or_init(|| {
        Arc::new(LocalLakeStore::new(Arc::new(
            object_store::local::LocalFileSystem::new(),
        )))
    });
    ctx.register_object_store(&Url::parse("file://").expect("a valid url"), store.clone());
}

/// A local store whose file operations run on the I/O threads. See the module docs.
#[derive(Debug)]
pub struct LocalLakeStore {
    inner: Arc<dyn ObjectStore>,
    io: &'static IoThreads,
}

impl LocalLakeStore {
    pub fn new(inner: Arc<dyn ObjectStore>) -> Self {
        LocalLakeStore { inner, io: files() }
    }

    /// Runs `op` against the inner store on an I/O thread, to completion.
    async fn on_io<T, F, Fut>(&self, op: F) -> object_store::Result<T>
    where
        T: Send + 'static,
        F: FnOnce(Arc<dyn ObjectStore>) -> Fut + Send + 'static,
        Fut: Future<Output = object_store::Result<T>>,
    {
        let inner = self.inner.clone();
        self.io
            .run(move || block_on(op(inner)))
            .await
            .map_err(io_failure)?
    }
}

fn io_failure(source: std::io::Error) -> object_store::Error {
    object_store::Error::Generic {
        store: STORE,
        source: Box::new(source),
    }
}

impl fmt::Display for LocalLakeStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{STORE}({})", self.inner)
    }
}

/// Reads `range` of `file` in chunks, each on an I/O thread.
fn read_in_chunks(
    io: &'static IoThreads,
    file: File,
    path: PathBuf,
    range: Range<u64>,
) -> BoxStream<'static, object_store::Result<Bytes>> {
    let file = Arc::new(file);
    let path = Arc::new(path);
    futures::stream::try_unfold(range.start, move |at| {
        let (file, path, end) = (file.clone(), path.clone(), range.end);
        async move {
            if at >= end {
                return Ok(None);
            }
            let len = (end - at).min(READ_CHUNK_BYTES);
            let bytes = io
                .run(move || read_at(&file, &path, at, len))
                .await
                .map_err(io_failure)??;
            Ok(Some((bytes, at + len)))
        }
    })
    .boxed()
}

fn read_at(file: &File, path: &std::path::Path, at: u64, len: u64) -> object_store::Result<Bytes> {
    let mut buffer = vec![0; len as usize];
    file.read_exact_at(&mut buffer, at)
        .map_err(|source| object_store::Error::Generic {
            store: STORE,
            source: format!(
                "reading {len} bytes at {at} of {}: {source}",
                path.display()
            )
            .into(),
        })?;
    Ok(buffer.into())
}

#[async_trait]
impl ObjectStore for LocalLakeStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let location = location.clone();
        self.on_io(move |s| async move { s.put_opts(&location, payload, opts).await })
            .await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        let location = location.clone();
        let upload = self
            .on_io(move |s| async move { s.put_multipart_opts(&location, opts).await })
            .await?;
        Ok(Box::new(LocalLakeUpload {
            inner: Arc::new(Mutex::new(upload)),
            io: self.io,
        }))
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        let location = location.clone();
        let head = options.head;
        let io = self.io;
        let (result, first) = self
            .on_io(move |s| async move {
                let result = s.get_opts(&location, options).await?;
                // A small read is read whole in the same job.
                let first = match &result.payload {
                    GetResultPayload::File(file, path)
                        if !head && result.range.end - result.range.start <= READ_CHUNK_BYTES =>
                    {
                        let len = result.range.end - result.range.start;
                        Some(read_at(file, path, result.range.start, len)?)
                    }
                    _ => None,
                };
                Ok((result, first))
            })
            .await?;
        let GetResult {
            payload,
            meta,
            range,
            attributes,
        } = result;
        let payload = match (payload, first) {
            (_, Some(bytes)) => {
                GetResultPayload::Stream(futures::stream::once(async { Ok(bytes) }).boxed())
            }
            (GetResultPayload::File(..), None) if head => {
                GetResultPayload::Stream(futures::stream::empty().boxed())
            }
            (GetResultPayload::File(file, path), None) => {
                GetResultPayload::Stream(read_in_chunks(io, file, path, range.clone()))
            }
            (stream @ GetResultPayload::Stream(_), None) => stream,
        };
        Ok(GetResult {
            payload,
            meta,
            range,
            attributes,
        })
    }

    async fn get_ranges(
        &self,
        location: &Path,
        ranges: &[Range<u64>],
    ) -> object_store::Result<Vec<Bytes>> {
        let location = location.clone();
        let ranges = ranges.to_vec();
        self.on_io(move |s| async move { s.get_ranges(&location, &ranges).await })
            .await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        let (inner, io) = (self.inner.clone(), self.io);
        locations
            .map(move |location| {
                let inner = inner.clone();
                async move {
                    let location = location?;
                    io.run(move || {
                        let one = futures::stream::once(async move { Ok(location) }).boxed();
                        block_on(inner.delete_stream(one).next())
                    })
                    .await
                    .map_err(io_failure)?
                    .unwrap_or_else(|| {
                        Err(object_store::Error::Generic {
                            store: STORE,
                            source: "a delete answered nothing".into(),
                        })
                    })
                }
            })
            .buffered(DELETES_IN_FLIGHT)
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let prefix = prefix.cloned();
        list_in_chunks(self.io, self.inner.clone(), move |s| {
            s.list(prefix.as_ref())
        })
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let (prefix, offset) = (prefix.cloned(), offset.clone());
        list_in_chunks(self.io, self.inner.clone(), move |s| {
            s.list_with_offset(prefix.as_ref(), &offset)
        })
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        let prefix = prefix.cloned();
        self.on_io(move |s| async move { s.list_with_delimiter(prefix.as_ref()).await })
            .await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        let (from, to) = (from.clone(), to.clone());
        self.on_io(move |s| async move { s.copy_opts(&from, &to, options).await })
            .await
    }

    async fn rename_opts(
        &self,
        from: &Path,
        to: &Path,
        options: RenameOptions,
    ) -> object_store::Result<()> {
        let (from, to) = (from.clone(), to.clone());
        self.on_io(move |s| async move { s.rename_opts(&from, &to, options).await })
            .await
    }
}

type Listing = BoxStream<'static, object_store::Result<ObjectMeta>>;

/// Pulls a listing on the I/O threads, [`LIST_CHUNK`] entries per job. `LocalFileSystem`
/// decides when a listing is made whether to walk in place or in blocking tasks, so the
/// first job makes it, with `open`.
fn list_in_chunks(
    io: &'static IoThreads,
    inner: Arc<dyn ObjectStore>,
    open: impl FnOnce(&dyn ObjectStore) -> Listing + Send + 'static,
) -> Listing {
    type State = (
        Option<Box<dyn FnOnce(&dyn ObjectStore) -> Listing + Send>>,
        Option<Listing>,
    );
    let state: Arc<Mutex<State>> = Arc::new(Mutex::new((Some(Box::new(open)), None)));
    futures::stream::unfold(false, move |done| {
        let (state, inner) = (state.clone(), inner.clone());
        async move {
            if done {
                return None;
            }
            let chunk = io
                .run(move || {
                    let mut state = state.lock().unwrap_or_else(|p| p.into_inner());
                    let (open, listing) = &mut *state;
                    if let Some(open) = open.take() {
                        *listing = Some(open(inner.as_ref()));
                    }
                    let Some(listing) = listing.as_mut() else {
                        return (Vec::new(), true);
                    };
                    let mut chunk = Vec::new();
                    while chunk.len() < LIST_CHUNK {
                        match block_on(listing.next()) {
                            Some(entry) => chunk.push(entry),
                            None => return (chunk, true),
                        }
                    }
                    (chunk, false)
                })
                .await;
            Some(match chunk {
                Ok((chunk, done)) => (futures::stream::iter(chunk), done),
                Err(e) => (futures::stream::iter(vec![Err(io_failure(e))]), true),
            })
        }
    })
    .flatten()
    .boxed()
}

/// A multipart upload whose parts are written on the I/O threads.
#[derive(Debug)]
struct LocalLakeUpload {
    inner: Arc<Mutex<Box<dyn MultipartUpload>>>,
    io: &'static IoThreads,
}

impl LocalLakeUpload {
    async fn on_io<T: Send + 'static>(
        &self,
        op: impl FnOnce(&mut Box<dyn MultipartUpload>) -> object_store::Result<T> + Send + 'static,
    ) -> object_store::Result<T> {
        let inner = self.inner.clone();
        self.io
            .run(move || op(&mut inner.lock().unwrap_or_else(|p| p.into_inner())))
            .await
            .map_err(io_failure)?
    }
}

#[async_trait]
impl MultipartUpload for LocalLakeUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        // `LocalUpload` fixes the part's offset when the part is made; it writes when polled.
        let part = self
            .inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .put_part(data);
        let io = self.io;
        Box::pin(async move { io.run(move || block_on(part)).await.map_err(io_failure)? })
    }

    async fn complete(&mut self) -> object_store::Result<PutResult> {
        self.on_io(|upload| block_on(upload.complete())).await
    }

    async fn abort(&mut self) -> object_store::Result<()> {
        self.on_io(|upload| block_on(upload.abort())).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use object_store::local::LocalFileSystem;
    use object_store::{ObjectStoreExt as _, WriteMultipart};

    use super::*;

    fn stores(dir: &std::path::Path) -> (LocalLakeStore, Arc<dyn ObjectStore>) {
        let plain: Arc<dyn ObjectStore> = Arc::new(LocalFileSystem::new_with_prefix(dir).unwrap());
        (LocalLakeStore::new(plain.clone()), plain)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_operation_answers_as_the_local_file_system_does() {
        let dir = tempfile::tempdir().unwrap();
        let (store, plain) = stores(dir.path());
        let a = Path::from("t/_delta_log/00000000000000000000.json");
        let big = Path::from("t/part-0.parquet");
        store
            .put(&a, Bytes::from_static(b"{\"commitInfo\":{}}").into())
            .await
            .unwrap();
        // Larger than one read chunk, written in parts.
        let content: Vec<u8> = (0..(READ_CHUNK_BYTES + 12345))
            .map(|i| (i % 251) as u8)
            .collect();
        let mut upload = WriteMultipart::new(store.put_multipart(&big).await.unwrap());
        for part in content.chunks(3 << 20) {
            upload.write(part);
        }
        upload.finish().await.unwrap();

        assert_eq!(
            plain.get(&a).await.unwrap().bytes().await.unwrap(),
            store.get(&a).await.unwrap().bytes().await.unwrap()
        );
        assert_eq!(
            store.get(&big).await.unwrap().bytes().await.unwrap(),
            Bytes::from(content.clone())
        );
        let r = 8_300_000..8_400_000;
        assert_eq!(
            store.get_range(&big, r.clone()).await.unwrap(),
            &content[8_300_000..8_400_000]
        );
        assert_eq!(
            store.get_ranges(&big, &[0..10, r.clone()]).await.unwrap(),
            plain.get_ranges(&big, &[0..10, r]).await.unwrap()
        );
        assert_eq!(store.head(&big).await.unwrap().size, content.len() as u64);

        let mut listed: Vec<_> = store
            .list(Some(&Path::from("t")))
            .map(|m| m.unwrap().location)
            .collect()
            .await;
        listed.sort();
        assert_eq!(listed, vec![a.clone(), big.clone()]);
        let delimited = store
            .list_with_delimiter(Some(&Path::from("t")))
            .await
            .unwrap();
        assert_eq!(delimited.common_prefixes, vec![Path::from("t/_delta_log")]);

        let copy = Path::from("t/copy.parquet");
        store.copy(&big, &copy).await.unwrap();
        let moved = Path::from("t/moved.parquet");
        store.rename(&copy, &moved).await.unwrap();
        assert_eq!(store.head(&moved).await.unwrap().size, content.len() as u64);
        let gone: Vec<_> = store
            .delete_stream(futures::stream::iter([Ok(moved.clone()), Ok(a.clone())]).boxed())
            .collect()
            .await;
        assert!(gone.iter().all(Result::is_ok), "{gone:?}");
        let missing = store.get(&a).await.unwrap_err();
        assert!(
            matches!(missing, object_store::Error::NotFound { .. }),
            "{missing}"
        );
    }

    /// deltalake's deletion-vector load: blocking tasks, each waiting for a read. With the
    /// runtime's pool bounded at two threads, eight of them finish only if the reads do not
    /// need a pool thread of their own.
    fn reads_from_blocking_tasks_finish(store: Arc<dyn ObjectStore>, location: Path) -> bool {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .max_blocking_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let handle = runtime.handle().clone();
        let (done, finished) = mpsc::channel();
        runtime.spawn(async move {
            let tasks: Vec<_> = (0..8)
                .map(|_| {
                    let (store, location, handle) =
                        (store.clone(), location.clone(), handle.clone());
                    tokio::task::spawn_blocking(move || {
                        handle.block_on(async { store.get(&location).await?.bytes().await })
                    })
                })
                .collect();
            for task in tasks {
                task.await.unwrap().unwrap();
            }
            let _ = done.send(());
        });
        let finished = finished.recv_timeout(Duration::from_secs(5)).is_ok();
        runtime.shutdown_background();
        finished
    }

    #[test]
    fn a_read_waited_for_in_a_blocking_task_needs_no_second_pool_thread() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("dv.bin"), b"deletion vector").unwrap();
        let (store, plain) = stores(dir.path());
        let location = Path::from("dv.bin");
        assert!(reads_from_blocking_tasks_finish(
            Arc::new(store),
            location.clone()
        ));
        assert!(
            !reads_from_blocking_tasks_finish(plain, location),
            "the local file system's reads deadlock a bounded pool: this test shows nothing"
        );
    }
}

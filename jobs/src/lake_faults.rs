//! Tests only: an object store that fails on command, for the seeded fault trials.
//!
//! When `silt up` runs with `SILTTEST_LAKE_FAULTS=<control file>`, every local (`file://`) lake
//! store deltalake opens in that process is wrapped in [`FaultyStore`]. A watcher reads the
//! control file every 50 ms:
//!
//! - `ok` (or no file): every operation goes through;
//! - `fail N`: the next N operations fail, then the store works again (a transient fault; the
//!   file is not re-read until its content changes);
//! - `down`: every operation fails until the file says otherwise (a permanent fault).
//!
//! Failures are `object_store::Error::Generic` errors, which deltalake and the tiering sink see
//! exactly as they would see a store that refuses requests.

use std::fmt;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use deltalake::DeltaResult;
use deltalake::logstore::{ObjectStoreFactory, ObjectStoreRef, StorageConfig};
use futures::StreamExt as _;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions,
};
use silt_connectors::delta::LocalLakeStoreFactory;
use url::Url;

/// The environment variable naming the control file.
pub const ENV: &str = "SILTTEST_LAKE_FAULTS";

/// What the control file currently asks for.
#[derive(Debug, Default)]
pub struct FaultSwitch {
    down: AtomicBool,
    /// Operations still to fail (transient fault).
    fail_next: AtomicI64,
    /// Operations failed so far (for the trial log).
    failed: AtomicI64,
}

impl FaultSwitch {
    fn check(&self, op: &'static str, location: &str) -> object_store::Result<()> {
        let transient = self
            .fail_next
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n > 0).then_some(n - 1)
            })
            .is_ok();
        if transient || self.down.load(Ordering::SeqCst) {
            self.failed.fetch_add(1, Ordering::Relaxed);
            return Err(object_store::Error::Generic {
                store: "silttest-faulty",
                source: format!(
                    "injected {} fault on {op} {location}",
                    if transient { "transient" } else { "permanent" }
                )
                .into(),
            });
        }
        Ok(())
    }

    /// Applies the control file's content.
    fn apply(&self, text: &str) {
        let text = text.trim();
        if text == "down" {
            self.down.store(true, Ordering::SeqCst);
            return;
        }
        self.down.store(false, Ordering::SeqCst);
        if let Some(n) = text
            .strip_prefix("fail ")
            .and_then(|n| n.trim().parse().ok())
        {
            self.fail_next.store(n, Ordering::SeqCst);
        }
    }
}

/// Installs the wrapper for `file://` stores when `SILTTEST_LAKE_FAULTS` is set. Call once,
/// inside a tokio runtime, before any lake table is opened.
pub fn install_from_env() {
    let Ok(control) = std::env::var(ENV) else {
        return;
    };
    let switch = Arc::new(FaultSwitch::default());
    let watched = switch.clone();
    let control = PathBuf::from(control);
    tokio::spawn(async move {
        let mut last = String::new();
        loop {
            let text = std::fs::read_to_string(&control).unwrap_or_else(|_| "ok".into());
            if text != last {
                watched.apply(&text);
                last = text;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    // The product's `file://` store first, so that it cannot replace this one later.
    silt_connectors::delta::register_object_stores();
    let url = Url::parse("file://").expect("a valid url");
    deltalake::logstore::object_store_factories().insert(url, Arc::new(FaultyFactory { switch }));
    tracing::warn!("tests only: the lake's object store fails on command ({ENV})");
}

struct FaultyFactory {
    switch: Arc<FaultSwitch>,
}

impl ObjectStoreFactory for FaultyFactory {
    fn parse_url_opts(
        &self,
        url: &Url,
        config: &StorageConfig,
    ) -> DeltaResult<(ObjectStoreRef, Path)> {
        let (store, path) = LocalLakeStoreFactory.parse_url_opts(url, config)?;
        let store: ObjectStoreRef = Arc::new(FaultyStore {
            inner: store,
            switch: self.switch.clone(),
        });
        Ok((store, path))
    }
}

/// Forwards every operation to `inner` unless the switch says fail.
#[derive(Debug)]
pub struct FaultyStore {
    inner: Arc<dyn ObjectStore>,
    switch: Arc<FaultSwitch>,
}

impl fmt::Display for FaultyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FaultyStore({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for FaultyStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.switch.check("put", location.as_ref())?;
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.switch.check("put_multipart", location.as_ref())?;
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.switch.check("get", location.as_ref())?;
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(
        &self,
        location: &Path,
        ranges: &[Range<u64>],
    ) -> object_store::Result<Vec<Bytes>> {
        self.switch.check("get_ranges", location.as_ref())?;
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        if let Err(e) = self.switch.check("delete", "") {
            return futures::stream::once(async move { Err(e) }).boxed();
        }
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        if let Err(e) = self
            .switch
            .check("list", prefix.map(|p| p.as_ref()).unwrap_or(""))
        {
            return futures::stream::once(async move { Err(e) }).boxed();
        }
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        if let Err(e) = self
            .switch
            .check("list", prefix.map(|p| p.as_ref()).unwrap_or(""))
        {
            return futures::stream::once(async move { Err(e) }).boxed();
        }
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.switch
            .check("list", prefix.map(|p| p.as_ref()).unwrap_or(""))?;
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.switch.check("copy", to.as_ref())?;
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(
        &self,
        from: &Path,
        to: &Path,
        options: RenameOptions,
    ) -> object_store::Result<()> {
        self.switch.check("rename", to.as_ref())?;
        self.inner.rename_opts(from, to, options).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_switch_follows_the_control_text() {
        let s = FaultSwitch::default();
        assert!(s.check("get", "a").is_ok());
        s.apply("fail 2");
        assert!(s.check("get", "a").is_err());
        assert!(s.check("get", "a").is_err());
        assert!(s.check("get", "a").is_ok(), "a transient fault passes");
        s.apply("down");
        assert!(s.check("put", "a").is_err());
        assert!(s.check("put", "a").is_err());
        s.apply("ok");
        assert!(s.check("put", "a").is_ok());
        assert_eq!(s.failed.load(Ordering::Relaxed), 4);
    }
}

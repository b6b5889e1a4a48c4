//! The committer sink (parallelism 1): committables in, one Delta commit per completed
//! checkpoint out.
//!
//! Contract: committables received before barrier `n` are in the state of checkpoint `n`.
//! `notify_checkpoint_complete(n)` commits every pending committable of checkpoints `<= n` in
//! ONE Delta commit with their txn actions; a restored state's pending committables belong to a
//! complete checkpoint and are committed in `open`. Replays are no-ops bucket by bucket (see
//! `LakeTable::plan`), so a crash anywhere between the Delta commit and the next checkpoint
//! loses and duplicates nothing. A committable that continues after where the lake ends (a
//! gap) fails the commit and calls `on_offset_gap`: restoring the same checkpoint meets the same
//! gap, so starting over is the job owner's decision.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use bytes::Bytes;
use silt_engine::{RestoredState, Sink, TaskContext};
use tracing::{info, warn};

use super::DeltaSinkConfig;
use super::committable::{Committable, decode_pending, encode_pending, from_batch};
use super::error::{Error, Result};
use super::table::LakeTable;
use crate::lake_format::LakeCommit;

pub struct DeltaCommitter {
    config: Arc<DeltaSinkConfig>,
    lake: Option<LakeTable>,
    /// Committables not yet committed, in arrival order.
    pending: Vec<Committable>,
    /// When maintenance last ran (`None`: not yet in this incarnation, so it runs after the
    /// first commit).
    maintained_at: Option<Instant>,
}

impl DeltaCommitter {
    pub fn new(config: Arc<DeltaSinkConfig>) -> Self {
        DeltaCommitter {
            config,
            lake: None,
            pending: Vec::new(),
            maintained_at: None,
        }
    }

    /// Commits every pending committable of checkpoints `<= up_to` in one Delta commit.
    async fn commit_up_to(&mut self, up_to: u64) -> Result<Option<LakeCommit>> {
        let (ready, later): (Vec<_>, Vec<_>) = self
            .pending
            .drain(..)
            .partition(|c| c.checkpoint_id <= up_to);
        self.pending = later;
        if ready.is_empty() {
            return Ok(None);
        }
        let result = self.commit(&ready).await;
        if result.is_err() {
            // Keep them for the next notification; a failing job restores them from state anyway.
            let later = std::mem::take(&mut self.pending);
            self.pending = ready;
            self.pending.extend(later);
        }
        result.map(Some)
    }

    async fn commit(&mut self, committables: &[Committable]) -> Result<LakeCommit> {
        let lake = self
            .lake
            .as_mut()
            .ok_or_else(|| Error::Internal("the delta committer was used before open".into()))?;
        let started = Instant::now();
        let plan = match lake.plan(committables).await {
            Err(gap @ Error::OffsetGap { .. }) => {
                if let Some(hook) = &self.config.on_offset_gap {
                    hook();
                }
                return Err(gap);
            }
            plan => plan?,
        };
        if let Some(fault) = &self.config.fault_injection {
            fault(super::FaultPoint::BeforeCommit);
        }
        let mut commit = lake.apply(&plan).await?;
        commit.duration = started.elapsed();
        if let Some(fault) = &self.config.fault_injection {
            fault(super::FaultPoint::AfterCommit);
        }
        let due = self
            .maintained_at
            .is_none_or(|at| at.elapsed() >= self.config.retention.interval);
        if due {
            self.maintained_at = Some(Instant::now());
            let pending_staged: BTreeSet<String> = self
                .pending
                .iter()
                .flat_map(|c| c.staged.iter().cloned())
                .collect();
            // Maintenance failing costs space, not rows: tiering goes on, and it runs again
            // at the next interval.
            match lake.maintain(&pending_staged).await {
                Ok(report) => {
                    info!(
                        table = %self.config.table_uri,
                        files_deleted = report.files_deleted,
                        staged_deleted = report.staged_deleted,
                        bytes_reclaimed = report.bytes_reclaimed,
                        "lake maintenance"
                    );
                    commit.maintenance = Some(report);
                }
                Err(e) => {
                    warn!(table = %self.config.table_uri, error = %e, "lake maintenance failed")
                }
            }
        }
        info!(
            table = %self.config.table_uri,
            version = commit.delta_version,
            checkpoint = commit.checkpoint_id,
            files = commit.files_added,
            rows = commit.rows,
            replayed = commit.replayed,
            "delta commit"
        );
        if let Some(hook) = &self.config.on_commit {
            (hook.as_ref())(commit.clone())
                .await
                .map_err(|e| Error::Hook(format!("{e:#}")))?;
        }
        Ok(commit)
    }
}

#[async_trait]
impl Sink for DeltaCommitter {
    async fn open(
        &mut self,
        _ctx: &TaskContext,
        restored: RestoredState,
    ) -> silt_engine::Result<()> {
        self.lake = Some(LakeTable::open(self.config.clone()).await?);
        if let Some(state) = restored.own() {
            self.pending = decode_pending(state)?;
        }
        // Everything in a restored state belongs to a complete checkpoint.
        self.commit_up_to(u64::MAX).await?;
        Ok(())
    }

    async fn write(&mut self, batch: RecordBatch) -> silt_engine::Result<()> {
        self.pending.extend(from_batch(&batch)?);
        Ok(())
    }

    async fn snapshot(&mut self, _checkpoint_id: u64) -> silt_engine::Result<Bytes> {
        Ok(Bytes::from(encode_pending(&self.pending)?))
    }

    async fn notify_checkpoint_complete(&mut self, checkpoint_id: u64) -> silt_engine::Result<()> {
        self.commit_up_to(checkpoint_id).await?;
        Ok(())
    }
}

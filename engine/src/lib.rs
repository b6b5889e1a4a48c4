//! silt's dataflow runtime, after Flink's model: a [`JobGraph`] of sources and operators is
//! deployed as one tokio task per subtask, connected by bounded channels that carry Arrow
//! record batches, checkpoint barriers and end-of-data. A checkpoint coordinator injects
//! barriers at the sources; operators with several inputs align them; when every subtask has
//! acknowledged, the states and then the metadata are written to [`CheckpointStorage`], and only
//! then is every task told the checkpoint is complete. Failures restart the job from the latest
//! complete checkpoint under a [`RestartStrategy`].
//!
//! Entry point: [`JobManager::submit`]. Connectors implement [`Source`], [`Operator`] and
//! [`Sink`].
//!
//! **Boundary:** this crate knows nothing of Fluss, Delta, HTTP, YAML or SQL; operator state is
//! bytes the operator encodes itself.

pub mod channel;
pub mod checkpoint;
mod error;
pub mod graph;
mod job;
pub mod metrics;
pub mod operator;
pub mod output;
mod task;

pub use channel::{Barrier, ChannelConfig};
pub use checkpoint::{
    CheckpointMetadata, CheckpointStorage, CompletedCheckpoint, LocalDirStorage,
    ObjectStoreStorage, storage_for,
};
pub use error::{BoxError, Cause, Error, Result};
pub use graph::{Edge, JobGraph, Vertex, VertexId};
pub use job::{
    CHECKPOINT_HISTORY_MAX, CheckpointConfig, Failure, JobConfig, JobHandle, JobManager, JobState,
    RestartStrategy,
};
pub use metrics::{CheckpointStats, JobMetrics, OperatorMetrics};
pub use operator::{
    Operator, OperatorFactory, RestoredState, Sink, Source, SourceFactory, SourcePoll, TaskContext,
};
pub use output::{Output, Partitioning};

//! The job graph as the definition names it, for the console to draw: each definition operator
//! with the engine vertices it became (a delta-sink is `<name>-writer` and `<name>-committer`),
//! and the edges between operators. It is built from the compiled engine graph, not from the
//! text `graph` lines, and a job's status joins it with the vertices' metrics.
//!
//! An operator's flow counts what crosses its boundary: `records_in` and `bytes_in` are summed
//! over the vertices fed from another operator (or by nothing: a source's readers),
//! `records_out` and `bytes_out` over the vertices whose output leaves it (or goes nowhere: a
//! sink's last vertex). So a delta-sink's rows are counted once, at its writers, and not again
//! as the file lists its writers hand its committer. `backpressured_ms` is summed over all its
//! vertices and, as the engine counts it, over all their subtasks.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use silt_engine::{JobGraph, OperatorMetrics};

/// Reads of a job's metrics closer together than this reuse the last back-pressure ratios:
/// two consoles polling at once would otherwise measure over a few milliseconds.
pub const SAMPLE_INTERVAL_MIN: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Topology {
    /// In definition order.
    pub operators: Vec<TopologyOperator>,
    pub edges: Vec<TopologyEdge>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopologyOperator {
    /// The operator's name in the definition, which edges use.
    pub id: String,
    pub name: String,
    /// The definition's operator type: `fluss-source`, `filter`, `delta-sink`, ...
    #[serde(rename = "type")]
    pub kind: String,
    pub parallelism: u32,
    /// What it reads or writes, or its expression, and the columns it outputs.
    pub description: String,
    /// The engine vertices it became, in the order they were built.
    pub vertices: Vec<String>,
    /// The vertices its `records_in` is counted at (see the module comment).
    #[serde(skip)]
    entry: Vec<String>,
    /// The vertices its `records_out` is counted at.
    #[serde(skip)]
    exit: Vec<String>,
    /// In a job's status only: absent in the validate answer.
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub flow: Option<OperatorFlow>,
}

/// An operator's metrics, over its vertices (see the module comment).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OperatorFlow {
    pub records_in: u64,
    pub records_out: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Summed over the operator's vertices and their subtasks, since the job started.
    pub backpressured_ms: u64,
    /// The share (0..1) of the interval since the job service's previous read of the metrics
    /// (at least [`SAMPLE_INTERVAL_MIN`]) that the operator's subtasks spent blocked on full
    /// output channels, averaged over its subtasks. Absent at the first read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backpressure_ratio: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopologyEdge {
    /// Operator ids.
    pub from: String,
    pub to: String,
    /// As the engine prints it: `forward`, `hash(__bucket)`, `rebalance`, `broadcast`.
    pub partitioning: String,
}

impl TopologyOperator {
    pub fn new(name: &str, kind: &str, parallelism: u32, description: String) -> Self {
        TopologyOperator {
            id: name.to_string(),
            name: name.to_string(),
            kind: kind.to_string(),
            parallelism,
            description,
            vertices: Vec::new(),
            entry: Vec::new(),
            exit: Vec::new(),
            flow: None,
        }
    }
}

impl Topology {
    /// The topology of `operators` (in definition order) compiled into `graph`, where
    /// `owner[v]` is the index of the operator engine vertex `v` was built for. Edges inside
    /// one operator (a delta-sink's writers to its committer) are not edges of the topology.
    pub fn from_graph(
        mut operators: Vec<TopologyOperator>,
        graph: &JobGraph,
        owner: &[usize],
    ) -> Topology {
        assert_eq!(
            owner.len(),
            graph.vertices().len(),
            "every vertex has an owner"
        );
        for vertex in graph.vertices() {
            let at = owner[vertex.id.0];
            let inputs = graph.inputs(vertex.id);
            let outputs = graph.outputs(vertex.id);
            let operator = &mut operators[at];
            operator.vertices.push(vertex.name.clone());
            if inputs.is_empty() || inputs.iter().any(|e| owner[e.from.0] != at) {
                operator.entry.push(vertex.name.clone());
            }
            if outputs.is_empty() || outputs.iter().any(|e| owner[e.to.0] != at) {
                operator.exit.push(vertex.name.clone());
            }
        }
        let edges = graph
            .edges()
            .iter()
            .filter(|e| owner[e.from.0] != owner[e.to.0])
            .map(|e| TopologyEdge {
                from: operators[owner[e.from.0]].id.clone(),
                to: operators[owner[e.to.0]].id.clone(),
                partitioning: e.partitioning.to_string(),
            })
            .collect();
        Topology { operators, edges }
    }

    /// This topology with each operator's flow from its vertices' `metrics`, the back-pressure
    /// ratio measured by `sampler` at `now`. An operator none of whose vertices has metrics
    /// gets no flow.
    pub fn with_flow(
        &self,
        metrics: &[OperatorMetrics],
        sampler: &mut BackpressureSampler,
        now: Instant,
    ) -> Topology {
        let mut topology = self.clone();
        let mut subtasks = Vec::with_capacity(topology.operators.len());
        for operator in &mut topology.operators {
            let of = |names: &[String]| -> Vec<&OperatorMetrics> {
                metrics.iter().filter(|m| names.contains(&m.name)).collect()
            };
            let (all, entry, exit) = (
                of(&operator.vertices),
                of(&operator.entry),
                of(&operator.exit),
            );
            subtasks.push(all.iter().map(|m| m.parallelism).sum::<u32>());
            if all.is_empty() {
                continue;
            }
            operator.flow = Some(OperatorFlow {
                records_in: entry.iter().map(|m| m.records_in).sum(),
                records_out: exit.iter().map(|m| m.records_out).sum(),
                bytes_in: entry.iter().map(|m| m.bytes_in).sum(),
                bytes_out: exit.iter().map(|m| m.bytes_out).sum(),
                backpressured_ms: all.iter().map(|m| m.backpressured_ms).sum(),
                backpressure_ratio: None,
            });
        }
        let blocked: Vec<u64> = topology
            .operators
            .iter()
            .map(|o| o.flow.as_ref().map_or(0, |f| f.backpressured_ms))
            .collect();
        let ratios = sampler.ratios(now, &blocked, &subtasks);
        for (operator, ratio) in topology.operators.iter_mut().zip(ratios) {
            if let Some(flow) = &mut operator.flow {
                flow.backpressure_ratio = ratio;
            }
        }
        topology
    }
}

/// Each operator's back-pressure ratio over the interval between two reads of a job's metrics.
#[derive(Debug, Default)]
pub struct BackpressureSampler {
    /// When the last interval ended, and each operator's `backpressured_ms` then.
    last: Option<(Instant, Vec<u64>)>,
    ratios: Vec<Option<f64>>,
}

impl BackpressureSampler {
    /// The ratios at `now` from each operator's total `backpressured_ms` and its subtasks:
    /// the blocked time since the last sample over the interval times the subtasks. A read
    /// sooner than [`SAMPLE_INTERVAL_MIN`] after the last sample answers the last ratios.
    pub fn ratios(
        &mut self,
        now: Instant,
        backpressured_ms: &[u64],
        subtasks: &[u32],
    ) -> Vec<Option<f64>> {
        debug_assert_eq!(backpressured_ms.len(), subtasks.len());
        match &self.last {
            Some((at, before)) if before.len() == backpressured_ms.len() => {
                let interval = now.saturating_duration_since(*at);
                if interval < SAMPLE_INTERVAL_MIN {
                    return self.ratios.clone();
                }
                let interval_ms = interval.as_secs_f64() * 1000.0;
                self.ratios = backpressured_ms
                    .iter()
                    .zip(before)
                    .zip(subtasks)
                    .map(|((total, earlier), n)| {
                        let blocked_ms = total.saturating_sub(*earlier) as f64;
                        let ratio = blocked_ms / (interval_ms * f64::from((*n).max(1)));
                        Some(ratio.clamp(0.0, 1.0))
                    })
                    .collect();
            }
            _ => self.ratios = vec![None; backpressured_ms.len()],
        }
        self.last = Some((now, backpressured_ms.to_vec()));
        self.ratios.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use silt_engine::{Partitioning, Result, TaskContext};

    /// A source `s` (x2) into a two-vertex sink `k` (`k-writer` x2, `k-committer` x1).
    fn topology() -> Topology {
        // The graph is only read, never run.
        let nothing = |_: &TaskContext| -> Result<Box<dyn silt_engine::Operator>> {
            unreachable!("the test graph does not run")
        };
        let mut graph = JobGraph::new();
        let s = graph.add_operator("s", 2, nothing);
        let w = graph.add_operator("k-writer", 2, nothing);
        let c = graph.add_operator("k-committer", 1, nothing);
        graph.connect(s, w, Partitioning::Forward);
        graph.connect(w, c, Partitioning::Rebalance);
        let operators = vec![
            TopologyOperator::new("s", "fluss-source", 2, "t".into()),
            TopologyOperator::new("k", "delta-sink", 2, "lake".into()),
        ];
        Topology::from_graph(operators, &graph, &[0, 1, 1])
    }

    fn metrics(
        name: &str,
        parallelism: u32,
        records: (u64, u64),
        blocked_ms: u64,
    ) -> OperatorMetrics {
        OperatorMetrics {
            name: name.into(),
            parallelism,
            records_in: records.0,
            bytes_in: records.0 * 10,
            records_out: records.1,
            bytes_out: records.1 * 10,
            backpressured_ms: blocked_ms,
            last_checkpoint_bytes: 0,
            last_snapshot_ms: 0,
        }
    }

    #[test]
    fn operators_take_their_vertices_and_edges_join_operators() {
        let t = topology();
        let vertices: Vec<_> = t.operators.iter().map(|o| o.vertices.join("+")).collect();
        assert_eq!(vertices, ["s", "k-writer+k-committer"]);
        assert_eq!(
            t.edges,
            [TopologyEdge {
                from: "s".into(),
                to: "k".into(),
                partitioning: "forward".into()
            }]
        );
        let shown = serde_json::to_value(&t.operators[1]).unwrap();
        assert_eq!(
            shown,
            serde_json::json!({"id": "k", "name": "k", "type": "delta-sink", "parallelism": 2,
                "description": "lake", "vertices": ["k-writer", "k-committer"]})
        );
    }

    #[test]
    fn flow_counts_at_the_boundary_and_backpressure_over_the_interval() {
        let t = topology();
        let mut sampler = BackpressureSampler::default();
        let start = Instant::now();
        let read = |sampler: &mut BackpressureSampler, at: Duration, blocked: [u64; 3]| {
            let m = [
                metrics("s", 2, (100, 100), blocked[0]),
                metrics("k-writer", 2, (100, 3), blocked[1]),
                metrics("k-committer", 1, (3, 0), blocked[2]),
            ];
            t.with_flow(&m, sampler, start + at).operators
        };
        let first = read(&mut sampler, Duration::ZERO, [0, 0, 0]);
        let sink = first[1].flow.clone().unwrap();
        assert_eq!(
            (
                sink.records_in,
                sink.records_out,
                sink.bytes_in,
                sink.backpressure_ratio
            ),
            (100, 0, 1000, None)
        );
        // Two source subtasks blocked 1 s each over 2 s: half; the sink 300 ms of 3 × 2 s.
        let second = read(&mut sampler, Duration::from_secs(2), [2000, 200, 100]);
        let ratios: Vec<_> = second
            .iter()
            .map(|o| o.flow.clone().unwrap().backpressure_ratio)
            .collect();
        assert_eq!(ratios, [Some(0.5), Some(0.05)]);
        assert_eq!(second[1].flow.as_ref().unwrap().backpressured_ms, 300);
        // A read within the minimum interval answers the same ratios.
        let soon = read(&mut sampler, Duration::from_millis(2100), [9000, 200, 100]);
        assert_eq!(soon[0].flow.as_ref().unwrap().backpressure_ratio, Some(0.5));
        let later = read(&mut sampler, Duration::from_secs(4), [9000, 200, 100]);
        assert_eq!(
            later[0].flow.as_ref().unwrap().backpressure_ratio,
            Some(1.0)
        );
        assert_eq!(
            later[1].flow.as_ref().unwrap().backpressure_ratio,
            Some(0.0)
        );
    }
}

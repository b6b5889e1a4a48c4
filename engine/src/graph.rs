//! The job graph: vertices (an operator factory, a parallelism, a name) and the edges between
//! them, validated before anything runs.

use std::collections::{BTreeSet, VecDeque};
use std::fmt;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::operator::{Operator, OperatorFactory, Sink, SourceFactory, TaskContext};
use crate::output::Partitioning;

/// Upper bound on a vertex's parallelism; a guard against typos, not a tuning knob.
pub const PARALLELISM_MAX: u32 = 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VertexId(pub usize);

#[derive(Clone)]
pub enum VertexKind {
    Source(Arc<dyn SourceFactory>),
    Operator(Arc<dyn OperatorFactory>),
}

#[derive(Clone)]
pub struct Vertex {
    pub id: VertexId,
    pub name: String,
    pub parallelism: u32,
    pub kind: VertexKind,
}

impl Vertex {
    pub fn is_source(&self) -> bool {
        matches!(self.kind, VertexKind::Source(_))
    }
}

#[derive(Debug, Clone)]
pub struct Edge {
    pub from: VertexId,
    pub to: VertexId,
    pub partitioning: Partitioning,
}

/// A dataflow graph under construction. `validate` (called by the job manager before a job
/// starts) rejects cycles, dangling edges, forward edges between different parallelisms and
/// other shapes the runtime cannot run.
#[derive(Clone, Default)]
pub struct JobGraph {
    vertices: Vec<Vertex>,
    edges: Vec<Edge>,
}

impl JobGraph {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn add_source(
        &mut self,
        name: impl Into<String>,
        parallelism: u32,
        factory: impl SourceFactory + 'static,
    ) -> VertexId {
        self.push(
            name.into(),
            parallelism,
            VertexKind::Source(Arc::new(factory)),
        )
    }

    pub fn add_operator(
        &mut self,
        name: impl Into<String>,
        parallelism: u32,
        factory: impl OperatorFactory + 'static,
    ) -> VertexId {
        self.push(
            name.into(),
            parallelism,
            VertexKind::Operator(Arc::new(factory)),
        )
    }

    /// Adds a vertex of sinks; `create` builds one per subtask and attempt.
    pub fn add_sink<S: Sink + 'static>(
        &mut self,
        name: impl Into<String>,
        parallelism: u32,
        create: impl Fn(&TaskContext) -> S + Send + Sync + 'static,
    ) -> VertexId {
        self.add_operator(
            name,
            parallelism,
            move |ctx: &TaskContext| -> Result<Box<dyn Operator>> { Ok(Box::new(create(ctx))) },
        )
    }

    /// Adds an edge. Edges into a vertex are numbered in the order they are added; that
    /// number is the `input` an operator sees in `process`.
    pub fn connect(&mut self, from: VertexId, to: VertexId, partitioning: Partitioning) {
        self.edges.push(Edge {
            from,
            to,
            partitioning,
        });
    }

    fn push(&mut self, name: String, parallelism: u32, kind: VertexKind) -> VertexId {
        let id = VertexId(self.vertices.len());
        self.vertices.push(Vertex {
            id,
            name,
            parallelism,
            kind,
        });
        id
    }

    pub fn vertices(&self) -> &[Vertex] {
        &self.vertices
    }

    pub fn edges(&self) -> &[Edge] {
        &self.edges
    }

    pub fn vertex(&self, id: VertexId) -> &Vertex {
        &self.vertices[id.0]
    }

    /// Incoming edges of a vertex, in input order.
    pub fn inputs(&self, id: VertexId) -> Vec<&Edge> {
        self.edges.iter().filter(|e| e.to == id).collect()
    }

    pub fn outputs(&self, id: VertexId) -> Vec<&Edge> {
        self.edges.iter().filter(|e| e.from == id).collect()
    }

    /// Checks the graph can run; the error names the vertex or edge and the fix.
    pub fn validate(&self) -> Result<()> {
        let invalid = |m: String| Err(Error::InvalidGraph(m));
        if self.vertices.is_empty() {
            return invalid("the graph has no vertices (add a source)".into());
        }
        let mut names = BTreeSet::new();
        for v in &self.vertices {
            if v.name.is_empty() {
                return invalid(format!("vertex #{} has an empty name", v.id.0));
            }
            if !names.insert(v.name.as_str()) {
                return invalid(format!(
                    "vertex name {:?} is used twice (names must be unique)",
                    v.name
                ));
            }
            if v.parallelism == 0 || v.parallelism > PARALLELISM_MAX {
                return invalid(format!(
                    "vertex {:?} has parallelism {} (must be 1..={PARALLELISM_MAX})",
                    v.name, v.parallelism
                ));
            }
        }
        for (i, e) in self.edges.iter().enumerate() {
            let Some(from) = self.vertices.get(e.from.0) else {
                return invalid(format!(
                    "edge #{i} starts at vertex #{} which does not exist",
                    e.from.0
                ));
            };
            let Some(to) = self.vertices.get(e.to.0) else {
                return invalid(format!(
                    "edge #{i} from {:?} ends at vertex #{} which does not exist",
                    from.name, e.to.0
                ));
            };
            if to.is_source() {
                return invalid(format!(
                    "edge #{i} {:?} -> {:?} points into a source (sources take no input)",
                    from.name, to.name
                ));
            }
            if e.partitioning == Partitioning::Forward && from.parallelism != to.parallelism {
                return invalid(format!(
                    "forward edge {:?} ({}) -> {:?} ({}) joins different parallelisms (use hash or rebalance, or equal parallelism)",
                    from.name, from.parallelism, to.name, to.parallelism
                ));
            }
            if let Partitioning::Hash { key_columns } = &e.partitioning
                && key_columns.is_empty()
            {
                return invalid(format!(
                    "hash edge {:?} -> {:?} names no key columns",
                    from.name, to.name
                ));
            }
        }
        for v in &self.vertices {
            if !v.is_source() && self.inputs(v.id).is_empty() {
                return invalid(format!(
                    "operator {:?} has no input edge (connect it or remove it)",
                    v.name
                ));
            }
        }
        if let Some(name) = self.find_cycle() {
            return invalid(format!(
                "the graph has a cycle through {name:?} (dataflows must be acyclic)"
            ));
        }
        Ok(())
    }

    /// Kahn's algorithm: a vertex left with unresolved inputs sits on a cycle.
    fn find_cycle(&self) -> Option<String> {
        let mut indegree = vec![0usize; self.vertices.len()];
        for e in &self.edges {
            indegree[e.to.0] += 1;
        }
        let mut ready: VecDeque<usize> =
            (0..indegree.len()).filter(|&v| indegree[v] == 0).collect();
        let mut visited = 0;
        while let Some(v) = ready.pop_front() {
            visited += 1;
            for e in self.edges.iter().filter(|e| e.from.0 == v) {
                indegree[e.to.0] -= 1;
                if indegree[e.to.0] == 0 {
                    ready.push_back(e.to.0);
                }
            }
        }
        if visited == self.vertices.len() {
            return None;
        }
        let stuck = (0..indegree.len()).find(|&v| indegree[v] > 0)?;
        Some(self.vertices[stuck].name.clone())
    }
}

impl fmt::Debug for JobGraph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for v in &self.vertices {
            let kind = if v.is_source() { "source" } else { "operator" };
            writeln!(f, "{} {:?} x{}", kind, v.name, v.parallelism)?;
        }
        for e in &self.edges {
            writeln!(
                f,
                "{:?} -[{}]-> {:?}",
                self.vertex(e.from).name,
                e.partitioning,
                self.vertex(e.to).name
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator::{Operator, Source, TaskContext};

    fn source() -> impl SourceFactory {
        |_: &TaskContext| -> Result<Box<dyn Source>> { Err(Error::Internal("unused".into())) }
    }
    fn op() -> impl OperatorFactory {
        |_: &TaskContext| -> Result<Box<dyn Operator>> { Err(Error::Internal("unused".into())) }
    }

    /// Builds a graph from `(name, parallelism, is_source)` and `(from, to, partitioning)`
    /// and returns the validation error, if any.
    fn check(
        vertices: &[(&str, u32, bool)],
        edges: &[(usize, usize, Partitioning)],
    ) -> Option<String> {
        let mut g = JobGraph::new();
        for &(name, p, is_source) in vertices {
            if is_source {
                g.add_source(name, p, source());
            } else {
                g.add_operator(name, p, op());
            }
        }
        for (from, to, part) in edges {
            g.connect(VertexId(*from), VertexId(*to), part.clone());
        }
        g.validate().err().map(|e| e.to_string())
    }

    fn hash(col: &str) -> Partitioning {
        Partitioning::Hash {
            key_columns: vec![col.into()],
        }
    }

    #[test]
    fn valid_graphs_pass() {
        assert_eq!(
            check(
                &[("src", 2, true), ("sink", 2, false)],
                &[(0, 1, Partitioning::Forward)]
            ),
            None
        );
        assert_eq!(
            check(&[("src", 2, true), ("agg", 3, false)], &[(0, 1, hash("k"))]),
            None
        );
        assert_eq!(
            check(
                &[("a", 1, true), ("b", 4, true), ("join", 2, false)],
                &[
                    (0, 2, Partitioning::Broadcast),
                    (1, 2, Partitioning::Rebalance)
                ]
            ),
            None
        );
    }

    #[test]
    fn invalid_graphs_name_the_problem() {
        let cases: &[(
            &[(&str, u32, bool)],
            Vec<(usize, usize, Partitioning)>,
            &str,
        )] = &[
            (&[], vec![], "no vertices"),
            (
                &[("s", 1, true), ("a", 1, false), ("b", 1, false)],
                vec![
                    (0, 1, Partitioning::Forward),
                    (1, 2, Partitioning::Forward),
                    (2, 1, Partitioning::Forward),
                ],
                "cycle",
            ),
            (
                &[("s", 1, true), ("a", 1, false)],
                vec![(0, 1, Partitioning::Forward), (0, 7, Partitioning::Forward)],
                "does not exist",
            ),
            (
                &[("s", 1, true), ("a", 2, false)],
                vec![(0, 1, Partitioning::Forward)],
                "different parallelisms",
            ),
            (&[("s", 1, true), ("a", 1, false)], vec![], "no input edge"),
            (
                &[("s", 1, true), ("t", 1, true)],
                vec![(0, 1, Partitioning::Forward)],
                "into a source",
            ),
            (&[("s", 0, true)], vec![], "parallelism 0"),
            (
                &[("s", 1, true), ("s", 1, false)],
                vec![(0, 1, Partitioning::Forward)],
                "used twice",
            ),
            (
                &[("s", 1, true), ("a", 1, false)],
                vec![(
                    0,
                    1,
                    Partitioning::Hash {
                        key_columns: vec![],
                    },
                )],
                "no key columns",
            ),
        ];
        for (vertices, edges, expected) in cases {
            let err = check(vertices, edges)
                .unwrap_or_else(|| panic!("expected an error containing {expected:?}"));
            assert!(
                err.contains(expected),
                "{err:?} should contain {expected:?}"
            );
        }
    }
}

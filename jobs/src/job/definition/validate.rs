//! The shape of a definition before any table is read: names, types, parallelisms, edges and
//! acyclicity, in an order where every edge goes forward.

use super::*;

/// A definition turned into an engine graph, with a description of each step.
pub struct CompiledJob {
    pub definition: JobDefinition,
    pub graph: JobGraph,
    pub checkpoint_interval: Duration,
    /// Human-readable lines: operators with their parallelism and output columns, then edges.
    pub summary: Vec<String>,
    /// The same graph, structured: operators with the engine vertices they became, and edges.
    pub topology: Topology,
    /// The id of each table the job's sources read (`db.table` → table id), as compiled.
    pub source_table_ids: std::collections::BTreeMap<String, i64>,
}

/// What the checks found out about one operator.
pub(super) enum Resolved {
    Source {
        config: FlussSourceConfig,
        facts: TableFacts,
    },
    Transform(Arc<Transform>),
    Delta(Box<DeltaSinkConfig>),
    Fluss(FlussSinkConfig),
    Print(PrintSinkConfig),
}

pub(super) struct Plan {
    pub(super) edges: Vec<EdgeDef>,
    /// Operator indexes in an order where every edge goes forward.
    pub(super) order: Vec<usize>,
}

pub(super) fn is_sink(kind: &str) -> bool {
    kind.ends_with("-sink")
}

pub(super) fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= NAME_LEN_MAX
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Checks the shape: the job's own fields, its operators (names, types, parallelisms), its
/// edges (they name operators, run from an output to an input, fit the partitioning), and
/// that they form no cycle. Every problem is pushed to `errors`; answers the plan, or `None`
/// when a problem keeps the later checks from running (no operators, an edge naming an unknown
/// operator, a cycle).
pub(super) fn check_shape(
    def: &JobDefinition,
    paths: &dyn PathNames,
    errors: &mut Vec<ValidationError>,
) -> Option<Plan> {
    let mut push = |path: String, message: String| errors.push(ValidationError { path, message });
    check_job_fields(def, paths, &mut push);
    if def.operators.is_empty() {
        push(
            "operators".into(),
            "a job needs at least one operator (start with a fluss-source)".into(),
        );
        return None;
    }
    let index = check_operators(def, paths, &mut push);
    let edges = def_edges(def);
    let inputs = check_edges(def, &edges, &index, paths, &mut push)?;
    let order = forward_order(def, &edges, &index, &inputs, &mut push)?;
    Some(Plan { edges, order })
}

type Push<'a> = dyn FnMut(String, String) + 'a;

/// The job's name, parallelism and checkpoint interval.
fn check_job_fields(def: &JobDefinition, paths: &dyn PathNames, push: &mut Push<'_>) {
    if !valid_name(&def.name) {
        push(
            paths.job("name"),
            format!(
                "job name {:?} must be 1 to {NAME_LEN_MAX} {NAME_CHARS}",
                def.name
            ),
        );
    }
    if let Some(p) = def.parallelism
        && !(1..=PARALLELISM_MAX).contains(&p)
    {
        push(
            paths.job("parallelism"),
            format!("{p} is out of range (use 1 to {PARALLELISM_MAX})"),
        );
    }
    if def.checkpoint.as_ref().and_then(|c| c.interval_ms) == Some(0) {
        push(
            paths.job("checkpoint.interval_ms"),
            "must be at least 1 (milliseconds)".into(),
        );
    }
}

/// Each operator's name (valid, unique), type and parallelism; answers the index of the valid
/// names.
fn check_operators<'d>(
    def: &'d JobDefinition,
    paths: &dyn PathNames,
    push: &mut Push<'_>,
) -> BTreeMap<&'d str, usize> {
    let mut index = BTreeMap::new();
    for (i, op) in def.operators.iter().enumerate() {
        if !valid_name(&op.name) {
            push(
                paths.operator(i, "name"),
                format!(
                    "operator name {:?} must be 1 to {NAME_LEN_MAX} {NAME_CHARS}",
                    op.name
                ),
            );
        } else if let Some(first) = index.insert(op.name.as_str(), i) {
            push(
                paths.operator(i, "name"),
                format!(
                    "{:?} is already the name of operators[{first}] (names must be unique)",
                    op.name
                ),
            );
        }
        if !OPERATOR_TYPES.contains(&op.kind.as_str()) {
            push(
                paths.operator(i, "type"),
                format!(
                    "unknown operator type {} (known: {})",
                    op.kind,
                    OPERATOR_TYPES.join(", ")
                ),
            );
        }
        if let Some(p) = op.parallelism
            && !(1..=PARALLELISM_MAX).contains(&p)
        {
            push(
                paths.operator(i, "parallelism"),
                format!("{p} is out of range (use 1 to {PARALLELISM_MAX})"),
            );
        }
    }
    index
}

/// The definition's edges; without any, a chain of the operators in order.
fn def_edges(def: &JobDefinition) -> Vec<EdgeDef> {
    match &def.edges {
        Some(edges) => edges.clone(),
        None => def
            .operators
            .windows(2)
            .map(|w| EdgeDef {
                from: w[0].name.clone(),
                to: w[1].name.clone(),
                partitioning: PartitioningDef::Auto,
                key: Vec::new(),
            })
            .collect(),
    }
}

/// Each edge (known ends, from an output into an input, key only for hash edges) and each
/// operator's inputs (every non-source has one, a delta-sink exactly one). Answers the count
/// of inputs per operator, or `None` when an edge names an unknown operator.
fn check_edges(
    def: &JobDefinition,
    edges: &[EdgeDef],
    index: &BTreeMap<&str, usize>,
    paths: &dyn PathNames,
    push: &mut Push<'_>,
) -> Option<Vec<usize>> {
    let mut bad_edges = false;
    let mut inputs = vec![0usize; def.operators.len()];
    for (e, edge) in edges.iter().enumerate() {
        let known = || {
            def.operators
                .iter()
                .map(|o| o.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let from = index.get(edge.from.as_str()).copied();
        let to = index.get(edge.to.as_str()).copied();
        if from.is_none() {
            push(
                paths.edge(e, "from"),
                format!("unknown operator {} (known: {})", edge.from, known()),
            );
        }
        if to.is_none() {
            push(
                paths.edge(e, "to"),
                format!("unknown operator {} (known: {})", edge.to, known()),
            );
        }
        let (Some(from), Some(to)) = (from, to) else {
            bad_edges = true;
            continue;
        };
        inputs[to] += 1;
        check_edge(def, e, edge, from, to, paths, push);
    }
    check_inputs(def, &inputs, bad_edges, paths, push);
    if bad_edges {
        return None;
    }
    Some(inputs)
}

/// Edge `e` between known operators: from an output into an input, a key only when hashed.
fn check_edge(
    def: &JobDefinition,
    e: usize,
    edge: &EdgeDef,
    from: usize,
    to: usize,
    paths: &dyn PathNames,
    push: &mut Push<'_>,
) {
    if def.operators[to].kind == "fluss-source" {
        push(
            paths.edge(e, "to"),
            format!("{} is a source and takes no input", edge.to),
        );
    }
    if is_sink(&def.operators[from].kind) {
        push(
            paths.edge(e, "from"),
            format!(
                "{} is a sink and has no output (end the edge chain there)",
                edge.from
            ),
        );
    }
    match (edge.partitioning, edge.key.is_empty()) {
        (PartitioningDef::Hash, true) => push(
            paths.edge(e, "key"),
            "a hash edge needs key columns (e.g. [\"id\"])".into(),
        ),
        (PartitioningDef::Hash, false) => {}
        (_, false) => push(
            paths.edge(e, "key"),
            "key is only used by hash edges (remove it or set partitioning: hash)".into(),
        ),
        _ => {}
    }
}

/// Every non-source operator has an input (unless an edge was unknown, which said so
/// already), a delta-sink exactly one.
fn check_inputs(
    def: &JobDefinition,
    inputs: &[usize],
    bad_edges: bool,
    paths: &dyn PathNames,
    push: &mut Push<'_>,
) {
    for (i, op) in def.operators.iter().enumerate() {
        let source = op.kind == "fluss-source";
        if !source && inputs[i] == 0 && !bad_edges {
            push(
                paths.operator(i, ""),
                format!(
                    "{} has no input edge (add an edge from a source or an operator)",
                    op.name
                ),
            );
        }
        if op.kind == "delta-sink" && inputs[i] > 1 {
            push(
                paths.operator(i, ""),
                format!(
                    "delta-sink {} has {} inputs; it takes one (its txn offsets are per source bucket)",
                    op.name, inputs[i]
                ),
            );
        }
    }
}

/// The operators in an order where every edge goes forward, or `None` (with the error) when
/// the edges form a cycle.
fn forward_order(
    def: &JobDefinition,
    edges: &[EdgeDef],
    index: &BTreeMap<&str, usize>,
    inputs: &[usize],
    push: &mut Push<'_>,
) -> Option<Vec<usize>> {
    // Kahn's algorithm in definition order, so the order is stable.
    let mut indegree = inputs.to_vec();
    let mut ready: VecDeque<usize> = (0..indegree.len()).filter(|&i| indegree[i] == 0).collect();
    let mut order = Vec::with_capacity(indegree.len());
    while let Some(i) = ready.pop_front() {
        order.push(i);
        for edge in edges.iter().filter(|e| index[e.from.as_str()] == i) {
            let to = index[edge.to.as_str()];
            indegree[to] -= 1;
            if indegree[to] == 0 {
                ready.push_back(to);
            }
        }
    }
    if order.len() < def.operators.len() {
        let stuck = (0..indegree.len())
            .find(|&i| indegree[i] > 0)
            .unwrap_or_default();
        push(
            "edges".into(),
            format!(
                "the edges form a cycle through {} (dataflows must be acyclic)",
                def.operators[stuck].name
            ),
        );
        return None;
    }
    Some(order)
}

pub(super) fn index_of(def: &JobDefinition, name: &str) -> usize {
    def.operators
        .iter()
        .position(|o| o.name == name)
        .expect("edges were checked")
}

pub(super) fn column_list(schema: &Schema) -> String {
    schema
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

pub(super) fn user_schema(schema: &Schema) -> SchemaRef {
    let system: BTreeSet<String> = stream_system_fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    Arc::new(Schema::new(
        schema
            .fields()
            .iter()
            .filter(|f| !system.contains(f.name()))
            .map(|f| f.as_ref().clone())
            .collect::<Vec<_>>(),
    ))
}

pub(super) fn with_system_columns(user: &Schema) -> SchemaRef {
    let mut fields: Vec<_> = user.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.extend(stream_system_fields());
    Arc::new(Schema::new(fields))
}

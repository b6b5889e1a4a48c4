//! A checked definition compiled into an engine graph: each operator resolved against the
//! catalog (its config, its input and output columns), then built into sources, operators,
//! sinks and edges.

use super::*;

/// Checks a definition against the catalog and builds its engine graph. All problems found are
/// returned together, each with its path.
pub async fn compile(
    def: &JobDefinition,
    ctx: &JobServiceConfig,
    catalog: &mut Catalog,
    paths: &dyn PathNames,
) -> Result<CompiledJob, ValidationErrors> {
    let mut errors = Vec::new();
    let Some(plan) = check_shape(def, paths, &mut errors) else {
        return Err(ValidationErrors(errors));
    };
    let n = def.operators.len();
    let parallelism: Vec<u32> = def
        .operators
        .iter()
        .map(|o| o.parallelism.or(def.parallelism).unwrap_or(1))
        .collect();
    let inputs_of = |i: usize| -> Vec<(usize, usize)> {
        plan.edges
            .iter()
            .enumerate()
            .filter(|(_, e)| index_of(def, &e.to) == i)
            .map(|(k, e)| (k, index_of(def, &e.from)))
            .collect()
    };
    // The source that feeds each operator (when exactly one does).
    let mut feeding_source: Vec<Option<usize>> = vec![None; n];
    let mut schemas: Vec<Option<SchemaRef>> = vec![None; n];
    let mut resolved: Vec<Option<Resolved>> = (0..n).map(|_| None).collect();
    for &i in &plan.order {
        let op = &def.operators[i];
        let inputs = inputs_of(i);
        feeding_source[i] = single_feeding_source(def, &inputs, &feeding_source);
        let Inputs {
            schema: input_schema,
            known: inputs_known,
        } = union_of_inputs(def, op, &inputs, &schemas, paths, &mut errors);
        if !inputs_known && op.kind != "fluss-source" {
            continue;
        }
        let result = resolve(
            def,
            i,
            input_schema,
            feeding_source[i].and_then(|s| match &resolved[s] {
                Some(Resolved::Source { facts, .. }) => Some(facts.clone()),
                _ => None,
            }),
            ctx,
            catalog,
            &Field { paths, index: i },
        )
        .await;
        match result {
            Ok((r, schema)) => {
                schemas[i] = schema;
                resolved[i] = Some(r);
            }
            Err(e) => errors.push(e),
        }
    }
    check_order_sensitive_edges(def, &plan, &resolved, paths, &mut errors);
    if !errors.is_empty() {
        return Err(ValidationErrors(errors));
    }
    Ok(build(def, ctx, plan, parallelism, schemas, resolved))
}

/// The source that feeds an operator with these `inputs` (`(edge, from)`), when exactly one
/// does, directly or through the operators between.
fn single_feeding_source(
    def: &JobDefinition,
    inputs: &[(usize, usize)],
    feeding_source: &[Option<usize>],
) -> Option<usize> {
    let mut sources: BTreeSet<usize> = BTreeSet::new();
    for (_, from) in inputs {
        if let Some(s) = feeding_source[*from] {
            sources.insert(s);
        }
        if def.operators[*from].kind == "fluss-source" {
            sources.insert(*from);
        }
    }
    if sources.len() == 1 {
        sources.iter().next().copied()
    } else {
        None
    }
}

/// What an operator's inputs carry.
struct Inputs {
    /// The columns of the first input resolved (`None`: no input, or none resolved).
    schema: Option<SchemaRef>,
    /// False when an input failed to resolve: its columns are unknown.
    known: bool,
}

/// Every input must carry the same columns (a union); an input that carries others is an
/// error at its edge.
fn union_of_inputs(
    def: &JobDefinition,
    op: &OperatorDef,
    inputs: &[(usize, usize)],
    schemas: &[Option<SchemaRef>],
    paths: &dyn PathNames,
    errors: &mut Vec<ValidationError>,
) -> Inputs {
    let mut union = Inputs {
        schema: None,
        known: true,
    };
    for (edge, from) in inputs {
        match &schemas[*from] {
            Some(s) => match &union.schema {
                None => union.schema = Some(s.clone()),
                Some(first) if first.fields() != s.fields() => errors.push(ValidationError {
                    path: paths.edge(*edge, ""),
                    message: format!(
                        "{} delivers columns ({}) unlike the other inputs of {} ({}); project them alike",
                        def.operators[*from].name,
                        column_list(s),
                        op.name,
                        column_list(first)
                    ),
                }),
                Some(_) => {}
            },
            None => union.known = false,
        }
    }
    union
}

/// Rebalance and broadcast edges reorder a bucket's changes; sinks that rely on that order
/// (delta, upsert into fluss) must not have one upstream.
pub(super) fn check_order_sensitive_edges(
    def: &JobDefinition,
    plan: &Plan,
    resolved: &[Option<Resolved>],
    paths: &dyn PathNames,
    errors: &mut Vec<ValidationError>,
) {
    for (i, r) in resolved.iter().enumerate() {
        let sensitive = matches!(r, Some(Resolved::Delta(_)))
            || matches!(r, Some(Resolved::Fluss(c)) if c.mode == FlussSinkMode::Upsert);
        if !sensitive {
            continue;
        }
        let mut stack = vec![i];
        let mut seen = BTreeSet::new();
        while let Some(at) = stack.pop() {
            if !seen.insert(at) {
                continue;
            }
            for (k, edge) in plan.edges.iter().enumerate() {
                if index_of(def, &edge.to) != at {
                    continue;
                }
                if matches!(
                    edge.partitioning,
                    PartitioningDef::Rebalance | PartitioningDef::Broadcast
                ) {
                    errors.push(ValidationError {
                        path: paths.edge(k, "partitioning"),
                        message: format!(
                            "{:?} reorders each bucket's changes ahead of the order-sensitive sink {} (use auto, forward or hash)",
                            edge.partitioning, def.operators[i].name
                        )
                        .to_lowercase(),
                    });
                }
                stack.push(index_of(def, &edge.from));
            }
        }
    }
}

pub(super) fn at(path: &str, message: impl Into<String>) -> ValidationError {
    ValidationError {
        path: path.to_string(),
        message: message.into(),
    }
}

/// Parses and checks one operator's config against its input; returns what to build and the
/// columns it outputs (`None` for sinks).
pub(super) async fn resolve(
    def: &JobDefinition,
    i: usize,
    input: Option<SchemaRef>,
    source: Option<TableFacts>,
    ctx: &JobServiceConfig,
    catalog: &mut Catalog,
    base: &Field<'_>,
) -> Result<(Resolved, Option<SchemaRef>), ValidationError> {
    let op = &def.operators[i];
    match op.kind.as_str() {
        "fluss-source" => resolve_fluss_source(op, ctx, catalog, base).await,
        "filter" | "project" | "sql" => resolve_transform(op, input, base).await,
        "delta-sink" => resolve_delta_sink(def, op, input, source, ctx, base).await,
        "fluss-sink" => resolve_fluss_sink(op, input, ctx, catalog, base).await,
        "print-sink" => resolve_print_sink(op, base),
        other => Err(at(&base.at(""), format!("unknown operator type {other}"))),
    }
}

/// The operator's input columns; an operator without an input is an error at its path.
fn needs_input(input: &Option<SchemaRef>, base: &Field<'_>) -> Result<SchemaRef, ValidationError> {
    input
        .clone()
        .ok_or_else(|| at(&base.at(""), "has no input"))
}

/// `start: lake` of an unpartitioned table: each bucket after the offset the lake's txn actions
/// record (nothing recorded: from the start).
async fn lake_offsets_start(
    ctx: &JobServiceConfig,
    facts: &TableFacts,
    base: &Field<'_>,
) -> Result<StartPosition, ValidationError> {
    let uri = lake_uri(ctx, &facts.database, &facts.table)
        .map_err(|e| at(&base.at("table"), e.to_string()))?;
    let buckets: Vec<BucketKey> = (0..facts.buckets as i32).map(BucketKey::table).collect();
    let table_id = facts.table_id.to_string();
    let lake = read_lake_offsets(&uri, &ctx.lake_storage_options, &table_id, &buckets)
        .await
        .map_err(|e| {
            at(
                &base.at("start"),
                format!("reading the lake offsets at {uri}: {e}"),
            )
        })?;
    Ok(StartPosition::Offsets(
        lake.map(|l| l.bucket_offsets).unwrap_or_default(),
    ))
}

/// A `fluss-source`: the table, and where in its history the job starts.
async fn resolve_fluss_source(
    op: &OperatorDef,
    ctx: &JobServiceConfig,
    catalog: &mut Catalog,
    base: &Field<'_>,
) -> Result<(Resolved, Option<SchemaRef>), ValidationError> {
    let c: FlussSourceDef = parse_config(&op.config, base)?;
    let facts = catalog
        .table(&c.table)
        .await
        .map_err(|m| at(&base.at("table"), m))?;
    let partitioned = !facts.partition_keys.is_empty();
    let start = match (c.start, c.timestamp_ms) {
        // The union read (lake, then the changelog after it) reads unpartitioned lakes only.
        (StartDef::Lake, None) if partitioned => {
            return Err(at(
                &base.at("start"),
                format!(
                    "{} is partitioned (by {}), and a job cannot start a partitioned table at its lake yet; use start: earliest, latest or timestamp, and read the tiered history with SQL over {}$lake",
                    c.table,
                    facts.partition_keys.join(", "),
                    c.table
                ),
            ));
        }
        (StartDef::Earliest, None) if partitioned => StartPosition::Earliest,
        // Every row of a lake-enabled table: hot retention may have left the oldest
        // only in the lake, so the lake first, then the changelog after it.
        (StartDef::Earliest, None) if facts.lake_enabled => StartPosition::LakeThenLog(LakeStart {
            table_uri: lake_uri(ctx, &facts.database, &facts.table)
                .map_err(|e| at(&base.at("table"), e.to_string()))?,
            storage_options: ctx.lake_storage_options.clone(),
            table_id: facts.table_id.to_string(),
        }),
        (StartDef::Earliest, None) => StartPosition::Earliest,
        (StartDef::Latest, None) => StartPosition::Latest,
        (StartDef::Timestamp, Some(ms)) => StartPosition::Timestamp(ms),
        (StartDef::Timestamp, None) => {
            return Err(at(
                &base.at("timestamp_ms"),
                "start: timestamp needs timestamp_ms (milliseconds since the epoch)",
            ));
        }
        // `start: lake` of a partitioned table is refused above.
        (StartDef::Lake, None) => lake_offsets_start(ctx, &facts, base).await?,
        (_, Some(_)) => {
            return Err(at(
                &base.at("timestamp_ms"),
                "timestamp_ms is only used with start: timestamp (remove it)",
            ));
        }
    };
    let mut config =
        FlussSourceConfig::new(&ctx.bootstrap, facts.database.clone(), facts.table.clone());
    config.table_id = Some(facts.table_id);
    config.start = start;
    config.credentials = ctx.credentials.clone();
    let schema = with_system_columns(&facts.schema);
    Ok((Resolved::Source { config, facts }, Some(schema)))
}

/// A `filter`, `project` or `sql` transform over the columns of its input.
async fn resolve_transform(
    op: &OperatorDef,
    input: Option<SchemaRef>,
    base: &Field<'_>,
) -> Result<(Resolved, Option<SchemaRef>), ValidationError> {
    let input = || needs_input(&input, base);
    let transform_error =
        |field: &str, e: silt_connectors::transform::Error| at(&base.at(field), e.to_string());
    let (field, built) = match op.kind.as_str() {
        "filter" => {
            let c: FilterDef = parse_config(&op.config, base)?;
            ("predicate", Transform::filter(input()?, &c.predicate).await)
        }
        "project" => {
            let c: ProjectDef = parse_config(&op.config, base)?;
            if c.expressions.is_empty() {
                return Err(at(
                    &base.at("expressions"),
                    "needs at least one expression (e.g. [\"id\", \"amount * 2 AS doubled\"])",
                ));
            }
            // Each expression alone first, so an error names the one that is wrong.
            for (k, e) in c.expressions.iter().enumerate() {
                Transform::project(input()?, std::slice::from_ref(e))
                    .await
                    .map_err(|err| transform_error(&format!("expressions[{k}]"), err))?;
            }
            let projected = Transform::project(input()?, &c.expressions).await;
            ("expressions", projected)
        }
        _ => {
            let c: SqlDef = parse_config(&op.config, base)?;
            ("statement", Transform::sql(input()?, &c.statement).await)
        }
    };
    let t = built.map_err(|e| transform_error(field, e))?;
    let schema = t.output_schema().clone();
    Ok((Resolved::Transform(Arc::new(t)), Some(schema)))
}

/// A `delta-sink`: the table kind its input's source gives it, its keys and where it writes.
async fn resolve_delta_sink(
    def: &JobDefinition,
    op: &OperatorDef,
    input: Option<SchemaRef>,
    source: Option<TableFacts>,
    ctx: &JobServiceConfig,
    base: &Field<'_>,
) -> Result<(Resolved, Option<SchemaRef>), ValidationError> {
    let c: DeltaSinkDef = parse_config(&op.config, base)?;
    let schema = needs_input(&input, base)?;
    let Some(source) = source else {
        return Err(at(
            &base.at(""),
            "a delta-sink must be fed by exactly one fluss-source (its txn offsets are that source's buckets)",
        ));
    };
    if !source.partition_keys.is_empty() {
        // A job's stream carries no partition ids, which the sink's txn offsets need (per
        // partition and bucket); the tiering service's own jobs carry them.
        return Err(at(
            &base.at(""),
            format!(
                "{}.{} is partitioned (by {}), and a job's delta-sink cannot take a partitioned table's rows yet; set table.datalake.enabled on the table and the tiering service writes its partitioned lake, or write the rows to a silt table with a fluss sink",
                source.database,
                source.table,
                source.partition_keys.join(", ")
            ),
        ));
    }
    for system in [
        silt_connectors::changelog::BUCKET_COLUMN,
        silt_connectors::changelog::OFFSET_COLUMN,
        silt_connectors::changelog::TIMESTAMP_COLUMN,
        silt_connectors::changelog::CHANGE_TYPE_COLUMN,
    ] {
        if schema.index_of(system).is_err() {
            return Err(at(
                &base.at(""),
                format!("the input lacks the system column {system} (do not drop it upstream)"),
            ));
        }
    }
    let user = user_schema(&schema);
    let kind = delta_sink_kind(&c, &source, &user, base)?;
    let (uri, storage_options) = delta_sink_location(&c, def, op, ctx, base)?;
    // The sink's lake belongs to this job's sink fed by this table id (its txn app ids are
    // the owner's): the same job submitted again after its source table was dropped and
    // created again must not take the old table's offsets for its own.
    let owner = format!("{}.{}.table-{}", def.name, op.name, source.table_id);
    check_sink_owner(&uri, &storage_options, &owner, &source, &base.at("")).await?;
    let mut config = DeltaSinkConfig::new(uri, owner, kind, user);
    config.storage_options = storage_options;
    if let Some(bytes) = c.target_file_bytes {
        config.target_file_bytes = bytes;
    }
    config.key_index_dir = Some(
        ctx.data_dir
            .join("key-index")
            .join(silt_connectors::lake::layout::JOBS_DIR)
            .join(&def.name)
            .join(&op.name),
    );
    config
        .validate()
        .map_err(|e| at(&base.at(""), e.to_string()))?;
    Ok((Resolved::Delta(Box::new(config)), None))
}

/// Refuses a sink location holding a lake of another owner: another job's or sink's, or this
/// sink's from a source table that was dropped since (its txn offsets are that table's).
async fn check_sink_owner(
    uri: &str,
    storage_options: &std::collections::HashMap<String, String>,
    owner: &str,
    source: &TableFacts,
    field: &str,
) -> Result<(), ValidationError> {
    let buckets = source.buckets;
    match silt_connectors::delta::lake_owner(uri, storage_options, owner, buckets).await {
        Ok(silt_connectors::delta::LakeOwner::Foreign { owner: other }) => Err(at(
            field,
            format!(
                "the Delta table at {uri} was written by {} and this sink is {owner} (a job's sink, fed by table id {} of {}.{}); write to another path, or delete {uri} first",
                other.as_deref().unwrap_or("another writer"),
                source.table_id,
                source.database,
                source.table
            ),
        )),
        Ok(_) => Ok(()),
        Err(e) => Err(at(field, format!("reading who owns {uri}: {e}"))),
    }
}

/// A delta-sink's table kind: a log for `append`; for `upsert`, a primary-key table over the
/// given keys or the source's primary key, each a column of the input.
fn delta_sink_kind(
    c: &DeltaSinkDef,
    source: &TableFacts,
    user: &Schema,
    base: &Field<'_>,
) -> Result<TableKind, ValidationError> {
    Ok(match c.mode {
        SinkModeDef::Append => {
            if c.keys.is_some() {
                return Err(at(
                    &base.at("keys"),
                    "keys are only used with mode: upsert (remove them)",
                ));
            }
            TableKind::Log
        }
        SinkModeDef::Upsert => {
            let keys = c.keys.clone().unwrap_or_else(|| source.primary_key.clone());
            if keys.is_empty() {
                return Err(at(
                    &base.at("keys"),
                    format!(
                        "mode: upsert needs key columns and {}.{} has no primary key (set keys, e.g. [\"id\"])",
                        source.database, source.table
                    ),
                ));
            }
            for key in &keys {
                if user.index_of(key).is_err() {
                    return Err(at(
                        &base.at("keys"),
                        format!(
                            "key column {key} is not in the input (columns: {}); keep it in the projection",
                            column_list(user)
                        ),
                    ));
                }
            }
            TableKind::PrimaryKey { key_columns: keys }
        }
    })
}

/// Where a delta-sink writes, and with which storage options: an explicit path confined
/// below the lake root and reached with the lake's options, or the job's own directory.
fn delta_sink_location(
    c: &DeltaSinkDef,
    def: &JobDefinition,
    op: &OperatorDef,
    ctx: &JobServiceConfig,
    base: &Field<'_>,
) -> Result<(String, std::collections::HashMap<String, String>), ValidationError> {
    // Definitions arrive over REST: an explicit path stays below the lake's job
    // directory, and the store is reached only with the lake's own options (options of
    // the definition could point the same URL at another endpoint).
    if !c.storage_options.is_empty() {
        return Err(at(
            &base.at("storage_options"),
            "a delta-sink reaches the lake with lake.storage_options from silt's config; remove storage_options here (set lake.storage_options instead)",
        ));
    }
    Ok(match &c.path {
        Some(path) => (
            silt_connectors::lake::layout::confine_sink_path(path, &ctx.lake_root)
                .map_err(|e| at(&base.at("path"), e.to_string()))?,
            ctx.lake_storage_options.clone(),
        ),
        None => (
            ctx.data_dir
                .join("lake")
                .join(silt_connectors::lake::layout::JOBS_DIR)
                .join(&def.name)
                .join(&op.name)
                .to_string_lossy()
                .to_string(),
            Default::default(),
        ),
    })
}

/// A `fluss-sink`: the table it writes, the mode its primary key allows, and the input's
/// columns checked against the table's.
async fn resolve_fluss_sink(
    op: &OperatorDef,
    input: Option<SchemaRef>,
    ctx: &JobServiceConfig,
    catalog: &mut Catalog,
    base: &Field<'_>,
) -> Result<(Resolved, Option<SchemaRef>), ValidationError> {
    let c: FlussSinkDef = parse_config(&op.config, base)?;
    let schema = needs_input(&input, base)?;
    let facts = catalog
        .table(&c.table)
        .await
        .map_err(|m| at(&base.at("table"), m))?;
    let has_key = !facts.primary_key.is_empty();
    let mode = match (c.mode, has_key) {
        (None, true) | (Some(SinkModeDef::Upsert), true) => FlussSinkMode::Upsert,
        (None, false) | (Some(SinkModeDef::Append), false) => FlussSinkMode::Append,
        (Some(SinkModeDef::Append), true) => {
            return Err(at(
                &base.at("mode"),
                format!("{} has a primary key: use mode upsert", c.table),
            ));
        }
        (Some(SinkModeDef::Upsert), false) => {
            return Err(at(
                &base.at("mode"),
                format!("{} is a log table: use mode append", c.table),
            ));
        }
    };
    for field in facts.schema.fields() {
        match schema.field_with_name(field.name()) {
            Err(_) => {
                return Err(at(
                    &base.at("table"),
                    format!(
                        "column {} of {} is missing from the input (columns: {}); project it upstream",
                        field.name(),
                        c.table,
                        column_list(&user_schema(&schema))
                    ),
                ));
            }
            Ok(have) if !same_encoding(have.data_type(), field.data_type()) => {
                return Err(at(
                    &base.at("table"),
                    format!(
                        "column {} is {} in the input but {} in {} (cast it upstream, e.g. CAST(x AS ...))",
                        field.name(),
                        have.data_type(),
                        field.data_type(),
                        c.table
                    ),
                ));
            }
            Ok(_) => {}
        }
    }
    let mut config = FlussSinkConfig::new(&ctx.bootstrap, facts.database, facts.table, mode);
    config.credentials = ctx.credentials.clone();
    Ok((Resolved::Fluss(config), None))
}

fn resolve_print_sink(
    op: &OperatorDef,
    base: &Field<'_>,
) -> Result<(Resolved, Option<SchemaRef>), ValidationError> {
    let c: PrintSinkDef = parse_config(&op.config, base)?;
    let mut config = PrintSinkConfig {
        system_columns: c.system_columns,
        ..PrintSinkConfig::default()
    };
    if let Some(rows) = c.rows_per_batch_max {
        config.rows_per_batch_max = rows;
    }
    Ok((Resolved::Print(config), None))
}

/// Whether a column of type `have` can go into a column of type `want` without a lossy cast:
/// equal types, or the same values in another Arrow encoding (string, binary and list views).
pub(super) fn same_encoding(
    have: &arrow::datatypes::DataType,
    want: &arrow::datatypes::DataType,
) -> bool {
    use arrow::datatypes::DataType::*;
    let family = |t: &arrow::datatypes::DataType| match t {
        Utf8 | LargeUtf8 | Utf8View => Some(0),
        Binary | LargeBinary | BinaryView => Some(1),
        _ => None,
    };
    have == want || family(have).is_some_and(|f| family(want) == Some(f))
}

/// Where the tiering service keeps the lake table of `database.table`.
pub fn lake_uri(ctx: &JobServiceConfig, database: &str, table: &str) -> anyhow::Result<String> {
    silt_connectors::lake::layout::lake_uri(&ctx.lake_root, database, table)
}

pub(super) fn build(
    def: &JobDefinition,
    ctx: &JobServiceConfig,
    plan: Plan,
    parallelism: Vec<u32>,
    schemas: Vec<Option<SchemaRef>>,
    mut resolved: Vec<Option<Resolved>>,
) -> CompiledJob {
    let source_table_ids = resolved
        .iter()
        .flatten()
        .filter_map(|r| match r {
            Resolved::Source { facts, .. } => Some((
                format!("{}.{}", facts.database, facts.table),
                facts.table_id,
            )),
            _ => None,
        })
        .collect();
    let n = def.operators.len();
    let mut builder = Builder {
        def,
        edges: &plan.edges,
        parallelism: &parallelism,
        graph: JobGraph::new(),
        vertex: vec![None; n],
        summary: Vec::new(),
        owner: Vec::new(),
        operators: vec![None; n],
    };
    for &i in &plan.order {
        let r = resolved[i].take().expect("every operator resolved");
        builder.add(i, r, schemas[i].as_ref());
    }
    let Builder {
        graph,
        mut summary,
        owner,
        operators,
        ..
    } = builder;
    let operators = operators
        .into_iter()
        .map(|o| o.expect("every operator built"));
    let topology = Topology::from_graph(operators.collect(), &graph, &owner);
    let checkpoint_interval = def
        .checkpoint
        .as_ref()
        .and_then(|c| c.interval_ms)
        .map_or(ctx.checkpoint_interval_default, Duration::from_millis);
    summary.insert(
        0,
        format!(
            "job {} ({} operators, checkpoint every {checkpoint_interval:?})",
            def.name,
            def.operators.len()
        ),
    );
    CompiledJob {
        definition: def.clone(),
        graph,
        checkpoint_interval,
        summary,
        topology,
        source_table_ids,
    }
}

/// The engine graph under construction, with the summary's lines and what the topology needs.
struct Builder<'d> {
    def: &'d JobDefinition,
    edges: &'d [EdgeDef],
    parallelism: &'d [u32],
    graph: JobGraph,
    /// The vertex each definition operator's output leaves from.
    vertex: Vec<Option<VertexId>>,
    summary: Vec<String>,
    /// The definition operator each engine vertex was built for, by vertex id.
    owner: Vec<usize>,
    /// Each definition operator as the topology shows it, once built.
    operators: Vec<Option<TopologyOperator>>,
}

impl Builder<'_> {
    /// Adds operator `i` (its inputs are built already) and its input edges; `schema` is the
    /// columns it outputs.
    fn add(&mut self, i: usize, resolved: Resolved, schema: Option<&SchemaRef>) {
        let def = self.def;
        let op = &def.operators[i];
        let p = self.parallelism[i];
        let inputs: Vec<(&EdgeDef, usize)> = self
            .edges
            .iter()
            .filter(|e| e.to == op.name)
            .map(|e| (e, index_of(def, &e.from)))
            .collect();
        let mut edges = Vec::new();
        let description = if let Resolved::Delta(config) = resolved {
            // A Delta sink is its writers and committer, connected to its one input here.
            let (edge, from) = inputs[0];
            let partitioning = edge_partitioning(edge, self.parallelism, from, i, true);
            let upstream = self.vertex[from].expect("built in order");
            let (committer, text) =
                add_delta(&mut self.graph, op, upstream, *config, p, &partitioning);
            self.vertex[i] = Some(committer);
            edges.push((from, partitioning));
            text
        } else {
            let (id, text) = add_vertex(&mut self.graph, op, p, resolved);
            self.vertex[i] = Some(id);
            for (edge, from) in inputs {
                let partitioning = edge_partitioning(edge, self.parallelism, from, i, false);
                let upstream = self.vertex[from].expect("built in order");
                self.graph.connect(upstream, id, partitioning.clone());
                edges.push((from, partitioning));
            }
            text
        };
        let columns = schema
            .map(|s| format!(" -> [{}]", column_list(&user_schema(s))))
            .unwrap_or_default();
        let text = summary_text(op, &description);
        self.summary
            .push(format!("  {:<24} x{p:<3} {text}{columns}", op.name));
        for (from, partitioning) in &edges {
            self.summary.push(edge_line(def, *from, partitioning, op));
        }
        self.owner.resize(self.graph.vertices().len(), i);
        let description = format!("{description}{columns}");
        self.operators[i] = Some(TopologyOperator::new(&op.name, &op.kind, p, description));
    }
}

/// An operator's text in the summary: its type, then its description (a transform's in
/// parentheses, after its expression).
fn summary_text(op: &OperatorDef, description: &str) -> String {
    match op.kind.as_str() {
        "filter" | "project" | "sql" => format!("{} ({description})", op.kind),
        _ => format!("{} {description}", op.kind),
    }
}

/// Adds a Delta sink (its writers and committer) after `upstream`; answers the committer and
/// the sink's description.
fn add_delta(
    graph: &mut JobGraph,
    op: &OperatorDef,
    upstream: VertexId,
    config: DeltaSinkConfig,
    p: u32,
    partitioning: &Partitioning,
) -> (VertexId, String) {
    let text = format!(
        "{} ({:?}) -> writers x{p} + committer x1",
        config.table_uri, config.kind
    );
    let committer = add_delta_sink(graph, &op.name, upstream, config, p, partitioning.clone())
        .expect("validated in resolve");
    (committer, text)
}

/// The summary's line of the edge from operator `from` into `to`.
fn edge_line(
    def: &JobDefinition,
    from: usize,
    partitioning: &Partitioning,
    to: &OperatorDef,
) -> String {
    format!(
        "    {} -[{partitioning}]-> {}",
        def.operators[from].name, to.name
    )
}

/// How an edge's records are spread: `auto` forwards between equal parallelisms and hashes by
/// bucket otherwise, and always into a Delta sink (its writers own buckets).
fn edge_partitioning(
    edge: &EdgeDef,
    parallelism: &[u32],
    from: usize,
    to: usize,
    into_delta: bool,
) -> Partitioning {
    match edge.partitioning {
        PartitioningDef::Auto if !into_delta && parallelism[from] == parallelism[to] => {
            Partitioning::Forward
        }
        PartitioningDef::Auto => Partitioning::Hash {
            key_columns: vec![BUCKET_COLUMN.to_string()],
        },
        PartitioningDef::Forward => Partitioning::Forward,
        PartitioningDef::Hash => Partitioning::Hash {
            key_columns: edge.key.clone(),
        },
        PartitioningDef::Rebalance => Partitioning::Rebalance,
        PartitioningDef::Broadcast => Partitioning::Broadcast,
    }
}

/// Adds the vertex of a resolved source, transform or sink (a Delta sink is added by
/// [`add_delta`]), and describes it: what it reads or writes, or a transform's expression.
fn add_vertex(
    graph: &mut JobGraph,
    op: &OperatorDef,
    p: u32,
    resolved: Resolved,
) -> (VertexId, String) {
    let name = op.name.clone();
    match resolved {
        Resolved::Source { config, facts } => {
            let describe = format!(
                "{}.{} ({} buckets) from {}",
                facts.database,
                facts.table,
                facts.buckets,
                start_text(&config.start)
            );
            let config = Arc::new(config);
            let id = graph.add_source(
                name,
                p,
                move |_: &TaskContext| -> silt_engine::Result<Box<dyn Source>> {
                    Ok(Box::new(FlussSource::new((*config).clone())))
                },
            );
            (id, describe)
        }
        Resolved::Transform(t) => {
            let describe = op_text(op);
            let id = graph.add_operator(name, p, TransformOperator::factory(t));
            (id, describe)
        }
        Resolved::Fluss(config) => {
            let describe = format!("{}.{} ({:?})", config.database, config.table, config.mode);
            let id = graph.add_sink(name, p, move |_: &TaskContext| {
                FlussSink::new(config.clone())
            });
            (id, describe)
        }
        Resolved::Print(config) => {
            let id = graph.add_sink(name, p, move |_: &TaskContext| {
                PrintSink::new(config.clone())
            });
            (id, "to the stdout of silt up".to_string())
        }
        Resolved::Delta(_) => unreachable!("add_delta adds Delta sinks"),
    }
}

/// Where a source starts, for the summary.
fn start_text(start: &StartPosition) -> String {
    match start {
        StartPosition::Earliest => "earliest".to_string(),
        StartPosition::Latest => "latest".to_string(),
        StartPosition::Timestamp(ms) => format!("timestamp {ms}"),
        StartPosition::Offsets(o) => format!("lake offsets {o:?}"),
        StartPosition::LakeThenLog(lake) => {
            format!(
                "earliest: the lake at {}, then the changelog",
                lake.table_uri
            )
        }
    }
}

pub(super) fn op_text(op: &OperatorDef) -> String {
    match &op.config {
        serde_json::Value::Object(map) => map
            .values()
            .map(|v| match v {
                serde_json::Value::String(s) => s.clone(),
                serde_json::Value::Array(items) => items
                    .iter()
                    .map(|i| i.as_str().map_or_else(|| i.to_string(), str::to_string))
                    .collect::<Vec<_>>()
                    .join(", "),
                other => other.to_string(),
            })
            .collect::<Vec<_>>()
            .join(" "),
        other => other.to_string(),
    }
}

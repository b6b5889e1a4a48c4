//! The query service over Arrow Flight SQL (gRPC), so standard clients (ADBC's Flight SQL
//! driver, the Flight SQL JDBC driver, arrow-flight's client) run silt's read-only SQL.
//! `silt up` serves it on `query.flight_listen` (127.0.0.1:8815 by default; empty turns it off).
//!
//! What is served:
//! - Statement queries: `GetFlightInfo(CommandStatementQuery)` runs the query under its
//!   deadline and keeps the result; the answer carries the schema, row and byte counts and one
//!   endpoint whose ticket `DoGet` redeems once to stream the batches.
//! - Prepared statements, stateless: the handle is the SQL text, the dataset schema is left
//!   empty (planning twice would read a real-time view's hot tail twice), parameters are
//!   refused. `GetFlightInfo(CommandPreparedStatementQuery)` runs the query as above. ADBC
//!   prepares every statement it executes.
//! - `GetSqlInfo`: the server's name, version and that it is read-only.
//! - Everything else (metadata listings, updates, ingest, transactions, Substrait) gets a
//!   status that says what is refused and why: `Unimplemented` for what silt does not serve,
//!   `InvalidArgument` for writes.
//!
//! Per call, in gRPC metadata: `x-silt-deadline-ms` (else `query.deadline_default_ms`; a
//! client's gRPC deadline shortens it so the deadline error, with its progress, arrives before
//! the client gives up) and `x-silt-wait-for-tiering: true`. Errors map as user error →
//! `InvalidArgument`, deadline passed → `DeadlineExceeded` (the message says how far the query
//! got), busy (every query slot taken, `query.waiting_max` waiting) → `Unavailable`, internal
//! → `Internal`. When `rest.token` is set every call must carry
//! `authorization: Bearer <token>`, else `Unauthenticated`.
//!
//! **Bounds:** results wait for `DoGet` at most `query.flight_result_ttl_ms` and take at most
//! `query.flight_results_bytes_max` bytes together; past that a query is refused with
//! `ResourceExhausted` until results are fetched or expire. Calls per connection are limited.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::flight_service_server::{FlightService, FlightServiceServer};
use arrow_flight::sql::metadata::{SqlInfoData, SqlInfoDataBuilder};
use arrow_flight::sql::server::{FlightSqlService, PeekableFlightDataStream};
use arrow_flight::sql::{
    ActionBeginTransactionRequest, ActionBeginTransactionResult,
    ActionClosePreparedStatementRequest, ActionCreatePreparedStatementRequest,
    ActionCreatePreparedStatementResult, CommandGetCatalogs, CommandGetDbSchemas,
    CommandGetPrimaryKeys, CommandGetSqlInfo, CommandGetTableTypes, CommandGetTables,
    CommandGetXdbcTypeInfo, CommandPreparedStatementQuery, CommandPreparedStatementUpdate,
    CommandStatementIngest, CommandStatementQuery, CommandStatementSubstraitPlan,
    CommandStatementUpdate, DoPutPreparedStatementResult, ProstMessageExt, SqlInfo,
    TicketStatementQuery,
};
use arrow_flight::{
    Action, FlightDescriptor, FlightEndpoint, FlightInfo, HandshakeRequest, Ticket,
};
use futures::{Stream, TryStreamExt as _};
use prost::Message as _;
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status, Streaming};
use tracing::{info, warn};

use super::{QueryError, QueryRequest, QueryResult, QueryService};
use crate::config::Config;

/// Metadata key of a per-call deadline in milliseconds.
pub const DEADLINE_HEADER: &str = "x-silt-deadline-ms";
/// Metadata key asking to wait for tiering (`true`).
pub const WAIT_FOR_TIERING_HEADER: &str = "x-silt-wait-for-tiering";

/// The endpoint's settings.
#[derive(Debug, Clone)]
pub struct FlightConfig {
    /// Address to bind; empty: no endpoint.
    pub listen: String,
    /// When non-empty, calls must carry `authorization: Bearer <token>`.
    pub token: String,
    /// Deadline of a call that names none.
    pub deadline_default: Duration,
    /// How long a result waits for its `DoGet`.
    pub result_ttl: Duration,
    /// Bytes of results waiting for `DoGet`, all calls together.
    pub results_bytes_max: usize,
    /// Calls in flight per connection.
    pub calls_per_connection_max: usize,
}

/// Binds `query.flight_listen` and serves Flight SQL until `shutdown` fires. `None` when the
/// endpoint is turned off (an empty address).
pub async fn serve(
    config: &Config,
    query: QueryService,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) -> Result<Option<(SocketAddr, tokio::task::JoinHandle<()>)>> {
    let flight = config.flight();
    if flight.listen.trim().is_empty() {
        return Ok(None);
    }
    let addr: SocketAddr = flight.listen.parse().with_context(|| {
        format!(
            "query.flight_listen {:?} is not an address like 127.0.0.1:8815 (empty turns Flight SQL off)",
            flight.listen
        )
    })?;
    let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| {
        format!("cannot bind Arrow Flight SQL to {addr} (set query.flight_listen, or empty to turn it off)")
    })?;
    let local = listener.local_addr()?;
    if !local.ip().is_loopback() {
        warn!(%local, "Arrow Flight SQL listens beyond loopback: set rest.token to require a bearer token");
    }
    let service = FlightSqlEndpoint::new(query, &flight);
    let router = tonic::transport::Server::builder()
        .concurrency_limit_per_connection(flight.calls_per_connection_max)
        .add_service(service.into_server(flight.token.clone()));
    info!(%local, "Arrow Flight SQL listening");
    let handle = tokio::spawn(async move {
        let incoming =
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
        let stop = async move {
            let _ = shutdown.wait_for(|stop| *stop).await;
        };
        if let Err(e) = router.serve_with_incoming_shutdown(incoming, stop).await {
            warn!(error = %e, "Arrow Flight SQL stopped with an error");
        }
    });
    Ok(Some((local, handle)))
}

/// The Flight SQL service over one [`QueryService`]. Cheap to clone.
#[derive(Clone)]
pub struct FlightSqlEndpoint {
    service: QueryService,
    deadline_default: Duration,
    results: Arc<PendingResults>,
}

impl FlightSqlEndpoint {
    pub fn new(service: QueryService, config: &FlightConfig) -> Self {
        FlightSqlEndpoint {
            service,
            deadline_default: config.deadline_default,
            results: Arc::new(PendingResults::new(
                config.results_bytes_max,
                config.result_ttl,
            )),
        }
    }

    /// The gRPC service, behind the bearer token when `token` is non-empty.
    pub fn into_server(
        self,
        token: String,
    ) -> tonic::service::interceptor::InterceptedService<
        FlightServiceServer<FlightSqlEndpoint>,
        impl tonic::service::Interceptor + Clone,
    > {
        let token = Arc::new(token);
        FlightServiceServer::with_interceptor(self, move |request: Request<()>| {
            check_token(&token, request)
        })
    }

    /// Runs `sql` with the call's deadline and wait flag, keeps the result and answers with
    /// the ticket that fetches it.
    async fn run(
        &self,
        sql: String,
        metadata: &MetadataMap,
        descriptor: FlightDescriptor,
    ) -> Result<Response<FlightInfo>, Status> {
        let request = QueryRequest {
            sql,
            deadline: call_deadline(metadata, self.deadline_default)?,
            wait_for_tiering: wait_for_tiering(metadata)?,
        };
        let result = self.service.execute(request).await.map_err(query_status)?;
        let schema = result.schema.clone();
        let (rows, bytes) = (result.num_rows(), result_bytes(&result));
        let handle = self.results.insert(result)?;
        let ticket = TicketStatementQuery {
            statement_handle: handle.to_vec().into(),
        };
        let info = FlightInfo::new()
            .try_with_schema(&schema)
            .map_err(|e| Status::internal(format!("encoding the result schema: {e}")))?
            .with_endpoint(
                FlightEndpoint::new().with_ticket(Ticket::new(ticket.as_any().encode_to_vec())),
            )
            .with_descriptor(descriptor)
            .with_total_records(rows as i64)
            .with_total_bytes(bytes as i64);
        Ok(Response::new(info))
    }
}

/// Requires `authorization: Bearer <token>` when a token is configured.
fn check_token(token: &str, request: Request<()>) -> Result<Request<()>, Status> {
    if token.is_empty() {
        return Ok(request);
    }
    let presented = request
        .metadata()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if presented.is_some_and(|p| crate::rest::constant_time_eq(p.as_bytes(), token.as_bytes())) {
        Ok(request)
    } else {
        Err(Status::unauthenticated(
            "missing or wrong bearer token: send the metadata `authorization: Bearer <rest.token>`",
        ))
    }
}

fn query_status(e: QueryError) -> Status {
    match &e {
        QueryError::User(_) => Status::invalid_argument(e.to_string()),
        QueryError::DeadlinePassed { .. } => Status::deadline_exceeded(e.to_string()),
        // gRPC's code for a transient overload that a retry with backoff may get past.
        QueryError::Busy { .. } => Status::unavailable(e.to_string()),
        QueryError::Internal(_) => Status::internal(e.to_string()),
    }
}

fn result_bytes(result: &QueryResult) -> usize {
    result
        .batches
        .iter()
        .map(RecordBatch::get_array_memory_size)
        .sum()
}

/// The call's deadline: `x-silt-deadline-ms`, else the default, shortened to end a little
/// before the client's own gRPC deadline (`grpc-timeout`) so the client sees silt's error.
fn call_deadline(metadata: &MetadataMap, default: Duration) -> Result<Duration, Status> {
    let mut deadline = match metadata.get(DEADLINE_HEADER) {
        None => default,
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .filter(|ms| *ms > 0)
            .map(Duration::from_millis)
            .ok_or_else(|| {
                Status::invalid_argument(format!(
                    "{DEADLINE_HEADER} must be a positive number of milliseconds, got {v:?}"
                ))
            })?,
    };
    if let Some(client) = metadata
        .get("grpc-timeout")
        .and_then(|v| v.to_str().ok())
        .and_then(parse_grpc_timeout)
    {
        let margin = (client / 20).min(Duration::from_millis(100));
        deadline = deadline.min(client.saturating_sub(margin).max(Duration::from_millis(1)));
    }
    Ok(deadline)
}

/// gRPC's `grpc-timeout`: at most 8 digits and a unit (H, M, S, m, u, n).
fn parse_grpc_timeout(value: &str) -> Option<Duration> {
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

fn wait_for_tiering(metadata: &MetadataMap) -> Result<bool, Status> {
    match metadata.get(WAIT_FOR_TIERING_HEADER).map(|v| v.to_str()) {
        None => Ok(false),
        Some(Ok(v)) if v.eq_ignore_ascii_case("true") => Ok(true),
        Some(Ok(v)) if v.eq_ignore_ascii_case("false") => Ok(false),
        Some(v) => Err(Status::invalid_argument(format!(
            "{WAIT_FOR_TIERING_HEADER} must be true or false, got {v:?}"
        ))),
    }
}

fn no_transactions(transaction_id: &Option<bytes::Bytes>) -> Result<(), Status> {
    match transaction_id {
        Some(_) => Err(Status::invalid_argument(
            "silt serves read-only queries without transactions; send the query without a transaction id",
        )),
        None => Ok(()),
    }
}

fn read_only(what: &str) -> Status {
    Status::invalid_argument(format!(
        "silt's Flight SQL endpoint is read-only: {what} is refused; write through the Fluss client or a pipeline"
    ))
}

fn not_served(what: &str) -> Status {
    Status::unimplemented(format!(
        "silt's Flight SQL endpoint serves SQL queries only (statements, prepared statements, GetSqlInfo); {what} is not served: query db.t, db.t$lake or db.t$lake$snapshots with SQL instead"
    ))
}

fn sql_info() -> &'static SqlInfoData {
    static INFO: OnceLock<SqlInfoData> = OnceLock::new();
    INFO.get_or_init(|| {
        let mut builder = SqlInfoDataBuilder::new();
        builder.append(SqlInfo::FlightSqlServerName, "silt");
        builder.append(SqlInfo::FlightSqlServerVersion, env!("CARGO_PKG_VERSION"));
        // The Arrow columnar format version (Schema.fbs) the IPC writer speaks.
        builder.append(SqlInfo::FlightSqlServerArrowVersion, "1.5");
        builder.append(SqlInfo::FlightSqlServerReadOnly, true);
        builder.append(SqlInfo::FlightSqlServerSql, true);
        builder.append(SqlInfo::FlightSqlServerSubstrait, false);
        // SqlSupportedTransaction::None.
        builder.append(SqlInfo::FlightSqlServerTransaction, 0i32);
        builder.append(SqlInfo::FlightSqlServerCancel, false);
        builder
            .build()
            .expect("static SqlInfo values have the union's types")
    })
}

type DataStream = Pin<Box<dyn Stream<Item = Result<arrow_flight::FlightData, Status>> + Send>>;

fn encode(schema: SchemaRef, batches: Vec<RecordBatch>) -> DataStream {
    let stream = FlightDataEncoderBuilder::new()
        .with_schema(schema)
        .build(futures::stream::iter(batches.into_iter().map(Ok)))
        .map_err(Status::from);
    Box::pin(stream)
}

#[tonic::async_trait]
impl FlightSqlService for FlightSqlEndpoint {
    type FlightService = FlightSqlEndpoint;

    async fn do_handshake(
        &self,
        _request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<
        Response<
            Pin<Box<dyn Stream<Item = Result<arrow_flight::HandshakeResponse, Status>> + Send>>,
        >,
        Status,
    > {
        Err(Status::unimplemented(
            "silt does not use the Flight handshake: send `authorization: Bearer <rest.token>` with each call (nothing when rest.token is empty)",
        ))
    }

    async fn get_flight_info_statement(
        &self,
        query: CommandStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        no_transactions(&query.transaction_id)?;
        let (metadata, _, descriptor) = request.into_parts();
        self.run(query.query, &metadata, descriptor).await
    }

    async fn get_flight_info_prepared_statement(
        &self,
        command: CommandPreparedStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let sql = String::from_utf8(command.prepared_statement_handle.to_vec()).map_err(|_| {
            Status::invalid_argument(
                "unknown prepared statement handle: prepare the statement with this server first",
            )
        })?;
        let (metadata, _, descriptor) = request.into_parts();
        self.run(sql, &metadata, descriptor).await
    }

    async fn do_get_statement(
        &self,
        ticket: TicketStatementQuery,
        _request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let Some(result) = self.results.take(&ticket.statement_handle) else {
            return Err(Status::not_found(format!(
                "no result for this ticket: a result is fetched once, within {:?} of GetFlightInfo (query.flight_result_ttl_ms); run the query again",
                self.results.ttl
            )));
        };
        Ok(Response::new(encode(result.schema, result.batches)))
    }

    async fn do_action_create_prepared_statement(
        &self,
        query: ActionCreatePreparedStatementRequest,
        _request: Request<Action>,
    ) -> Result<ActionCreatePreparedStatementResult, Status> {
        no_transactions(&query.transaction_id)?;
        Ok(ActionCreatePreparedStatementResult {
            prepared_statement_handle: query.query.into_bytes().into(),
            dataset_schema: Default::default(),
            parameter_schema: Default::default(),
        })
    }

    async fn do_action_close_prepared_statement(
        &self,
        _query: ActionClosePreparedStatementRequest,
        _request: Request<Action>,
    ) -> Result<(), Status> {
        // Handles are the SQL itself; there is nothing to free.
        Ok(())
    }

    async fn do_put_prepared_statement_query(
        &self,
        _query: CommandPreparedStatementQuery,
        _request: Request<PeekableFlightDataStream>,
    ) -> Result<DoPutPreparedStatementResult, Status> {
        Err(Status::invalid_argument(
            "silt's prepared statements take no parameters: write the values into the SQL",
        ))
    }

    async fn get_flight_info_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let ticket = Ticket::new(query.as_any().encode_to_vec());
        let info = FlightInfo::new()
            .try_with_schema(&sql_info().schema())
            .map_err(|e| Status::internal(format!("encoding the SqlInfo schema: {e}")))?
            .with_endpoint(FlightEndpoint::new().with_ticket(ticket))
            .with_descriptor(request.into_inner());
        Ok(Response::new(info))
    }

    async fn do_get_sql_info(
        &self,
        query: CommandGetSqlInfo,
        _request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let builder = query.into_builder(sql_info());
        let schema = builder.schema();
        let batch = builder
            .build()
            .map_err(|e| Status::internal(format!("building SqlInfo: {e}")))?;
        Ok(Response::new(encode(schema, vec![batch])))
    }

    async fn get_flight_info_substrait_plan(
        &self,
        _query: CommandStatementSubstraitPlan,
        _request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        Err(not_served("a Substrait plan"))
    }

    async fn get_flight_info_catalogs(
        &self,
        _query: CommandGetCatalogs,
        _request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        Err(not_served("GetCatalogs"))
    }

    async fn get_flight_info_schemas(
        &self,
        _query: CommandGetDbSchemas,
        _request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        Err(not_served("GetDbSchemas"))
    }

    async fn get_flight_info_tables(
        &self,
        _query: CommandGetTables,
        _request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        Err(not_served("GetTables"))
    }

    async fn get_flight_info_table_types(
        &self,
        _query: CommandGetTableTypes,
        _request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        Err(not_served("GetTableTypes"))
    }

    async fn get_flight_info_primary_keys(
        &self,
        _query: CommandGetPrimaryKeys,
        _request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        Err(not_served("GetPrimaryKeys"))
    }

    async fn get_flight_info_xdbc_type_info(
        &self,
        _query: CommandGetXdbcTypeInfo,
        _request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        Err(not_served("GetXdbcTypeInfo"))
    }

    async fn do_put_statement_update(
        &self,
        _ticket: CommandStatementUpdate,
        _request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        Err(read_only("an update statement"))
    }

    async fn do_put_statement_ingest(
        &self,
        _ticket: CommandStatementIngest,
        _request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        Err(read_only("bulk ingest"))
    }

    async fn do_put_prepared_statement_update(
        &self,
        _query: CommandPreparedStatementUpdate,
        _request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        Err(read_only("a prepared update"))
    }

    async fn do_action_begin_transaction(
        &self,
        _query: ActionBeginTransactionRequest,
        _request: Request<Action>,
    ) -> Result<ActionBeginTransactionResult, Status> {
        Err(not_served("a transaction"))
    }

    async fn register_sql_info(&self, _id: i32, _result: &SqlInfo) {}
}

/// Results between `GetFlightInfo` and their one `DoGet`, bounded in bytes and in time.
struct PendingResults {
    inner: Mutex<Pending>,
    bytes_max: usize,
    ttl: Duration,
}

#[derive(Default)]
struct Pending {
    entries: HashMap<[u8; 16], PendingResult>,
    bytes: usize,
}

struct PendingResult {
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
    bytes: usize,
    expires_at: Instant,
}

impl PendingResults {
    fn new(bytes_max: usize, ttl: Duration) -> Self {
        PendingResults {
            inner: Mutex::default(),
            bytes_max,
            ttl,
        }
    }

    /// Keeps `result` and returns its handle; refuses when the bound would be exceeded.
    fn insert(&self, result: QueryResult) -> Result<[u8; 16], Status> {
        let bytes = result_bytes(&result);
        let now = Instant::now();
        let mut pending = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let expired: Vec<[u8; 16]> = pending
            .entries
            .iter()
            .filter(|(_, r)| r.expires_at <= now)
            .map(|(k, _)| *k)
            .collect();
        for key in expired {
            if let Some(r) = pending.entries.remove(&key) {
                pending.bytes -= r.bytes;
            }
        }
        if pending.bytes + bytes > self.bytes_max {
            return Err(Status::resource_exhausted(format!(
                "results waiting for DoGet would exceed {} bytes (query.flight_results_bytes_max): fetch earlier results first, or narrow the query",
                self.bytes_max
            )));
        }
        let handle: [u8; 16] = rand::random();
        pending.bytes += bytes;
        pending.entries.insert(
            handle,
            PendingResult {
                schema: result.schema,
                batches: result.batches,
                bytes,
                expires_at: now + self.ttl,
            },
        );
        debug_assert!(pending.bytes <= self.bytes_max);
        Ok(handle)
    }

    /// Removes and returns the result of `handle` unless it expired.
    fn take(&self, handle: &[u8]) -> Option<PendingResult> {
        let key: [u8; 16] = handle.try_into().ok()?;
        let mut pending = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let result = pending.entries.remove(&key)?;
        pending.bytes -= result.bytes;
        (result.expires_at > Instant::now()).then_some(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metadata(pairs: &[(&'static str, &str)]) -> MetadataMap {
        let mut m = MetadataMap::new();
        for (k, v) in pairs {
            m.insert(*k, v.parse().unwrap());
        }
        m
    }

    #[test]
    fn query_errors_map_to_grpc_codes() {
        let deadline = QueryError::DeadlinePassed {
            deadline: Duration::from_millis(50),
            progress: "while planning".into(),
        };
        let busy = QueryError::Busy {
            running: 4,
            waiting: 32,
        };
        for (error, code) in [
            (QueryError::User("bad".into()), tonic::Code::InvalidArgument),
            (deadline, tonic::Code::DeadlineExceeded),
            (busy, tonic::Code::Unavailable),
            (QueryError::Internal("broken".into()), tonic::Code::Internal),
        ] {
            assert_eq!(query_status(error).code(), code);
        }
    }

    #[test]
    fn grpc_timeouts() {
        assert_eq!(parse_grpc_timeout("5S"), Some(Duration::from_secs(5)));
        assert_eq!(parse_grpc_timeout("250m"), Some(Duration::from_millis(250)));
        assert_eq!(parse_grpc_timeout("2M"), Some(Duration::from_secs(120)));
        assert_eq!(parse_grpc_timeout("7u"), Some(Duration::from_micros(7)));
        for bad in ["", "S", "5", "5x", "123456789S", "-5S"] {
            assert_eq!(parse_grpc_timeout(bad), None, "{bad}");
        }
    }

    #[test]
    fn call_deadlines() {
        let d = Duration::from_secs(30);
        assert_eq!(call_deadline(&metadata(&[]), d).unwrap(), d);
        let m = metadata(&[(DEADLINE_HEADER, "1500")]);
        assert_eq!(call_deadline(&m, d).unwrap(), Duration::from_millis(1500));
        // The client's own gRPC deadline wins when shorter, minus a margin.
        let m = metadata(&[(DEADLINE_HEADER, "1500"), ("grpc-timeout", "1S")]);
        assert_eq!(call_deadline(&m, d).unwrap(), Duration::from_millis(950));
        let m = metadata(&[("grpc-timeout", "10S")]);
        assert_eq!(call_deadline(&m, d).unwrap(), Duration::from_millis(9900));
        for bad in ["0", "soon", "-1"] {
            let m = metadata(&[(DEADLINE_HEADER, bad)]);
            let e = call_deadline(&m, d).unwrap_err();
            assert_eq!(e.code(), tonic::Code::InvalidArgument, "{bad}");
        }
    }

    #[test]
    fn wait_flags() {
        assert!(!wait_for_tiering(&metadata(&[])).unwrap());
        assert!(wait_for_tiering(&metadata(&[(WAIT_FOR_TIERING_HEADER, "TRUE")])).unwrap());
        assert!(!wait_for_tiering(&metadata(&[(WAIT_FOR_TIERING_HEADER, "false")])).unwrap());
        assert!(wait_for_tiering(&metadata(&[(WAIT_FOR_TIERING_HEADER, "yes")])).is_err());
    }

    #[test]
    fn tokens() {
        let with = |v: Option<&str>| {
            let mut r = Request::new(());
            if let Some(v) = v {
                r.metadata_mut().insert("authorization", v.parse().unwrap());
            }
            r
        };
        assert!(check_token("", with(None)).is_ok());
        assert!(check_token("s3cret", with(Some("Bearer s3cret"))).is_ok());
        for bad in [
            None,
            Some("Bearer nope"),
            Some("s3cret"),
            Some("Basic s3cret"),
        ] {
            let e = check_token("s3cret", with(bad)).unwrap_err();
            assert_eq!(e.code(), tonic::Code::Unauthenticated);
        }
    }

    fn result(rows: i64) -> QueryResult {
        let batch = RecordBatch::try_from_iter([(
            "n",
            Arc::new(arrow::array::Int64Array::from_iter_values(0..rows)) as arrow::array::ArrayRef,
        )])
        .unwrap();
        QueryResult {
            schema: batch.schema(),
            batches: vec![batch],
            tables: vec![],
            elapsed: Duration::ZERO,
            lake_files_scanned: 0,
        }
    }

    #[test]
    fn pending_results_are_fetched_once_and_bounded() {
        let one = result_bytes(&result(1000));
        let pending = PendingResults::new(one * 2, Duration::from_secs(60));
        let a = pending.insert(result(1000)).unwrap();
        let b = pending.insert(result(1000)).unwrap();
        let e = pending.insert(result(1000)).unwrap_err();
        assert_eq!(e.code(), tonic::Code::ResourceExhausted);
        assert_eq!(pending.take(&a).unwrap().batches[0].num_rows(), 1000);
        assert!(pending.take(&a).is_none(), "a ticket is redeemed once");
        assert!(pending.take(b"short").is_none());
        pending.insert(result(1000)).unwrap();
        assert!(pending.take(&b).is_some());

        let expiring = PendingResults::new(one, Duration::from_millis(1));
        let c = expiring.insert(result(1000)).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        assert!(expiring.take(&c).is_none(), "an expired result is gone");
        expiring.insert(result(1000)).unwrap();
    }
}

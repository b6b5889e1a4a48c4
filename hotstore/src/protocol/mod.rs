//! The Fluss wire protocol as silt speaks it: frames, request headers, API keys, error codes.
//!
//! A frame is a big-endian `i32` length followed by that many bytes. A request frame opens with
//! an 8-byte header (`i16` api key, `i16` api version, `i32` request id), then the protobuf body.
//! A response frame opens with a `u8` response type (0 success, 1 error) and the `i32` request
//! id; a success carries the response body, an error carries an [`messages::ErrorResponse`].

pub mod frame;
pub mod messages;

pub use frame::Frame;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use prost::Message;

/// Length of the request header that precedes every request body.
pub const REQUEST_HEADER_BYTES: usize = 8;

const RESPONSE_SUCCESS: u8 = 0;
const RESPONSE_ERROR: u8 = 1;

/// API keys silt serves, with the Fluss numbers.
pub mod api {
    pub const API_VERSIONS: i16 = 1000;
    pub const CREATE_DATABASE: i16 = 1001;
    pub const DROP_DATABASE: i16 = 1002;
    pub const LIST_DATABASES: i16 = 1003;
    pub const DATABASE_EXISTS: i16 = 1004;
    pub const CREATE_TABLE: i16 = 1005;
    pub const DROP_TABLE: i16 = 1006;
    pub const GET_TABLE_INFO: i16 = 1007;
    pub const LIST_TABLES: i16 = 1008;
    pub const LIST_PARTITION_INFOS: i16 = 1009;
    pub const TABLE_EXISTS: i16 = 1010;
    pub const GET_TABLE_SCHEMA: i16 = 1011;
    pub const METADATA: i16 = 1012;
    pub const PRODUCE_LOG: i16 = 1014;
    pub const FETCH_LOG: i16 = 1015;
    pub const PUT_KV: i16 = 1016;
    pub const LOOKUP: i16 = 1017;
    pub const LIST_OFFSETS: i16 = 1021;
    pub const GET_LATEST_KV_SNAPSHOTS: i16 = 1023;
    pub const GET_KV_SNAPSHOT_METADATA: i16 = 1024;
    pub const GET_FILE_SYSTEM_SECURITY_TOKEN: i16 = 1025;
    pub const INIT_WRITER: i16 = 1026;
    pub const GET_LAKE_SNAPSHOT: i16 = 1032;
    pub const LIMIT_SCAN: i16 = 1033;
    pub const PREFIX_LOOKUP: i16 = 1034;
    pub const GET_DATABASE_INFO: i16 = 1035;
    pub const CREATE_PARTITION: i16 = 1036;
    pub const DROP_PARTITION: i16 = 1037;
    pub const AUTHENTICATE: i16 = 1038;
    pub const ALTER_TABLE: i16 = 1044;
    pub const ACQUIRE_KV_SNAPSHOT_LEASE: i16 = 1056;
    pub const RELEASE_KV_SNAPSHOT_LEASE: i16 = 1057;
    pub const DROP_KV_SNAPSHOT_LEASE: i16 = 1058;
    pub const GET_TABLE_STATS: i16 = 1059;
    pub const ALTER_DATABASE: i16 = 1060;
    pub const SCAN_KV: i16 = 1061;
    pub const GET_CLUSTER_HEALTH: i16 = 1062;

    /// Every API silt serves with the (min, max) version it accepts. ApiVersions answers with
    /// exactly this list, so a client never negotiates a version silt does not implement.
    pub const SERVED: &[(i16, i16, i16)] = &[
        (API_VERSIONS, 0, 0),
        (CREATE_DATABASE, 0, 0),
        (DROP_DATABASE, 0, 0),
        (LIST_DATABASES, 0, 0),
        (DATABASE_EXISTS, 0, 0),
        (CREATE_TABLE, 0, 0),
        (DROP_TABLE, 0, 0),
        (GET_TABLE_INFO, 0, 0),
        (LIST_TABLES, 0, 0),
        (LIST_PARTITION_INFOS, 0, 0),
        (TABLE_EXISTS, 0, 0),
        (GET_TABLE_SCHEMA, 0, 0),
        (METADATA, 0, 0),
        (PRODUCE_LOG, 0, 0),
        (FETCH_LOG, 0, 0),
        (PUT_KV, 0, 1),
        (LOOKUP, 0, 1),
        (LIST_OFFSETS, 0, 0),
        (GET_LATEST_KV_SNAPSHOTS, 0, 0),
        (GET_KV_SNAPSHOT_METADATA, 0, 0),
        (GET_FILE_SYSTEM_SECURITY_TOKEN, 0, 0),
        (INIT_WRITER, 0, 0),
        (GET_LAKE_SNAPSHOT, 0, 0),
        (LIMIT_SCAN, 0, 0),
        (PREFIX_LOOKUP, 0, 1),
        (GET_DATABASE_INFO, 0, 0),
        (CREATE_PARTITION, 0, 0),
        (DROP_PARTITION, 0, 0),
        (AUTHENTICATE, 0, 0),
        (ALTER_TABLE, 0, 0),
        (ACQUIRE_KV_SNAPSHOT_LEASE, 0, 0),
        (RELEASE_KV_SNAPSHOT_LEASE, 0, 0),
        (DROP_KV_SNAPSHOT_LEASE, 0, 0),
        (GET_TABLE_STATS, 0, 0),
        (ALTER_DATABASE, 0, 0),
        (SCAN_KV, 0, 0),
        (GET_CLUSTER_HEALTH, 0, 0),
    ];
}

/// Fluss error codes silt returns; the numbers are the ones `fluss::rpc::FlussError` maps.
pub mod code {
    pub const UNKNOWN_SERVER_ERROR: i32 = -1;
    pub const UNSUPPORTED_VERSION: i32 = 2;
    pub const CORRUPT_MESSAGE: i32 = 3;
    pub const DATABASE_NOT_EXIST: i32 = 4;
    pub const DATABASE_NOT_EMPTY: i32 = 5;
    pub const DATABASE_ALREADY_EXIST: i32 = 6;
    pub const TABLE_NOT_EXIST: i32 = 7;
    pub const TABLE_ALREADY_EXIST: i32 = 8;
    pub const SCHEMA_NOT_EXIST: i32 = 9;
    pub const LOG_STORAGE_EXCEPTION: i32 = 10;
    pub const KV_STORAGE_EXCEPTION: i32 = 11;
    pub const RECORD_TOO_LARGE: i32 = 13;
    pub const CORRUPT_RECORD: i32 = 14;
    pub const INVALID_TABLE: i32 = 15;
    pub const INVALID_DATABASE: i32 = 16;
    pub const LOG_OFFSET_OUT_OF_RANGE: i32 = 19;
    pub const NON_PRIMARY_KEY_TABLE: i32 = 20;
    pub const UNKNOWN_TABLE_OR_BUCKET: i32 = 21;
    pub const OUT_OF_ORDER_SEQUENCE: i32 = 31;
    pub const INVALID_COLUMN_PROJECTION: i32 = 34;
    pub const INVALID_TARGET_COLUMN: i32 = 35;
    pub const PARTITION_NOT_EXISTS: i32 = 36;
    pub const TABLE_NOT_PARTITIONED: i32 = 37;
    pub const INVALID_TIMESTAMP: i32 = 38;
    pub const INVALID_CONFIG: i32 = 39;
    pub const KV_SNAPSHOT_NOT_EXIST: i32 = 41;
    pub const PARTITION_ALREADY_EXISTS: i32 = 42;
    pub const PARTITION_SPEC_INVALID: i32 = 43;
    pub const PARTITION_MAX_NUM: i32 = 45;
    pub const AUTHENTICATE_EXCEPTION: i32 = 46;
    pub const BUCKET_MAX_NUM: i32 = 49;
    pub const LAKE_SNAPSHOT_NOT_EXIST: i32 = 53;
    pub const INVALID_ALTER_TABLE: i32 = 56;
    pub const DELETION_DISABLED: i32 = 57;
    pub const SCANNER_EXPIRED: i32 = 66;
    pub const UNKNOWN_SCANNER_ID: i32 = 67;
    pub const INVALID_SCAN_REQUEST: i32 = 68;
    pub const TOO_MANY_SCANNERS: i32 = 69;
}

/// An error answered to the client: a Fluss error code and a message for a human.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub code: i32,
    pub message: String,
}

impl ApiError {
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        ApiError {
            code,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "fluss error {}: {}", self.code, self.message)
    }
}

/// The header of a request frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHeader {
    pub api_key: i16,
    pub api_version: i16,
    pub request_id: i32,
}

/// Why a frame could not be read; each closes the connection.
#[derive(Debug, PartialEq, Eq)]
pub enum FrameError {
    /// The length prefix is negative.
    NegativeLength(i32),
    /// The length prefix exceeds `frame_bytes_max`.
    TooLarge {
        frame_bytes: usize,
        frame_bytes_max: usize,
    },
    /// The frame is shorter than a request header.
    ShortHeader(usize),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::NegativeLength(length) => write!(f, "negative frame length {length}"),
            FrameError::TooLarge {
                frame_bytes,
                frame_bytes_max,
            } => write!(
                f,
                "frame of {frame_bytes} bytes exceeds frame_bytes_max {frame_bytes_max} \
                 (raise hotstore frame_bytes_max or lower the client's request size)"
            ),
            FrameError::ShortHeader(len) => {
                write!(
                    f,
                    "frame of {len} bytes is shorter than the {REQUEST_HEADER_BYTES}-byte request header"
                )
            }
        }
    }
}

/// Checks a frame's length prefix against the limit and returns the body length.
pub fn frame_length(prefix: [u8; 4], frame_bytes_max: usize) -> Result<usize, FrameError> {
    let length = i32::from_be_bytes(prefix);
    let length = usize::try_from(length).map_err(|_| FrameError::NegativeLength(length))?;
    if length > frame_bytes_max {
        return Err(FrameError::TooLarge {
            frame_bytes: length,
            frame_bytes_max,
        });
    }
    Ok(length)
}

/// Splits a request frame (without its length prefix) into header and body.
pub fn parse_request(mut frame: Bytes) -> Result<(RequestHeader, Bytes), FrameError> {
    if frame.len() < REQUEST_HEADER_BYTES {
        return Err(FrameError::ShortHeader(frame.len()));
    }
    let header = RequestHeader {
        api_key: frame.get_i16(),
        api_version: frame.get_i16(),
        request_id: frame.get_i32(),
    };
    Ok((header, frame))
}

/// Encodes a complete success response frame, length prefix included.
pub fn encode_success(request_id: i32, body: &impl Message) -> Bytes {
    encode_response(RESPONSE_SUCCESS, request_id, body)
}

/// Encodes a complete error response frame, length prefix included.
pub fn encode_error(request_id: i32, error: &ApiError) -> Bytes {
    let body = messages::ErrorResponse {
        error_code: error.code,
        error_message: Some(error.message.clone()),
    };
    encode_response(RESPONSE_ERROR, request_id, &body)
}

/// A response frame: length prefix, response type, request id (5 bytes after the prefix),
/// then the body.
fn encode_response(response_type: u8, request_id: i32, body: &impl Message) -> Bytes {
    let body_len = body.encoded_len();
    let mut buf = BytesMut::with_capacity(4 + 5 + body_len);
    buf.put_i32((5 + body_len) as i32);
    buf.put_u8(response_type);
    buf.put_i32(request_id);
    body.encode(&mut buf).expect("BytesMut grows on demand");
    buf.freeze()
}

/// Decodes a request body, mapping a protobuf failure to CORRUPT_MESSAGE.
pub fn decode<M: Message + Default>(body: Bytes, what: &str) -> Result<M, ApiError> {
    M::decode(body).map_err(|error| {
        ApiError::new(
            code::CORRUPT_MESSAGE,
            format!("cannot decode {what} request: {error}"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_length_checks() {
        let check = |len: i32, max: usize| frame_length(len.to_be_bytes(), max);
        assert_eq!(check(10, 100), Ok(10));
        assert_eq!(check(100, 100), Ok(100));
        assert_eq!(check(-1, 100), Err(FrameError::NegativeLength(-1)));
        assert_eq!(
            check(101, 100),
            Err(FrameError::TooLarge {
                frame_bytes: 101,
                frame_bytes_max: 100
            })
        );
    }

    #[test]
    fn parse_request_reads_header() {
        let mut frame = BytesMut::new();
        frame.put_i16(api::METADATA);
        frame.put_i16(0);
        frame.put_i32(42);
        frame.put_slice(b"body");
        let (header, body) = parse_request(frame.freeze()).unwrap();
        assert_eq!(
            header,
            RequestHeader {
                api_key: api::METADATA,
                api_version: 0,
                request_id: 42
            }
        );
        assert_eq!(&body[..], b"body");
        assert_eq!(
            parse_request(Bytes::from_static(b"short")),
            Err(FrameError::ShortHeader(5))
        );
    }

    #[test]
    fn error_frame_layout() {
        let frame = encode_error(
            7,
            &ApiError::new(code::TABLE_NOT_EXIST, "unknown table a.b"),
        );
        let mut rest = frame.slice(4..);
        assert_eq!(
            i32::from_be_bytes(frame[..4].try_into().unwrap()) as usize,
            rest.len()
        );
        assert_eq!(rest.get_u8(), RESPONSE_ERROR);
        assert_eq!(rest.get_i32(), 7);
        let decoded = messages::ErrorResponse::decode(rest).unwrap();
        assert_eq!(decoded.error_code, code::TABLE_NOT_EXIST);
    }
}

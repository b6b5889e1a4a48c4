//! The hotstore's frame handling over raw TCP: an unknown API key gets a proper error
//! response, a malformed or oversized frame closes only its own connection, and
//! `connections_max` is enforced.

use std::time::Duration;

use anyhow::{Result, ensure};
use silt_testkit::hotstore;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn request(api_key: i16, request_id: i32, body: &[u8]) -> Vec<u8> {
    let mut frame = Vec::new();
    frame.extend_from_slice(&((8 + body.len()) as i32).to_be_bytes());
    frame.extend_from_slice(&api_key.to_be_bytes());
    frame.extend_from_slice(&0i16.to_be_bytes());
    frame.extend_from_slice(&request_id.to_be_bytes());
    frame.extend_from_slice(body);
    frame
}

/// Reads one response frame: (response type, request id, body).
async fn response(stream: &mut TcpStream) -> Result<(u8, i32, Vec<u8>)> {
    let mut prefix = [0u8; 4];
    tokio::time::timeout(Duration::from_secs(10), stream.read_exact(&mut prefix)).await??;
    let mut frame = vec![0u8; i32::from_be_bytes(prefix) as usize];
    stream.read_exact(&mut frame).await?;
    let id = i32::from_be_bytes(frame[1..5].try_into()?);
    Ok((frame[0], id, frame[5..].to_vec()))
}

/// True when the server closed the connection (EOF) within the timeout.
async fn closed(stream: &mut TcpStream) -> bool {
    let mut byte = [0u8; 1];
    matches!(
        tokio::time::timeout(Duration::from_secs(10), stream.read(&mut byte)).await,
        Ok(Ok(0)) | Ok(Err(_))
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_are_checked_per_connection() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let server = hotstore::start_with(dir.path(), |config| {
        config.frame_bytes_max = 1024;
        config.connections_max = 3;
    })
    .await?;
    let addr = server.local_addr();

    // An API key silt does not serve: error response (type 1) with UNSUPPORTED_VERSION (2).
    let mut good = TcpStream::connect(addr).await?;
    good.write_all(&request(4242, 1, b"")).await?;
    let (kind, id, body) = response(&mut good).await?;
    ensure!(
        kind == 1 && id == 1,
        "error response for request 1, got type {kind} id {id}"
    );
    ensure!(
        body.first() == Some(&0x08),
        "ErrorResponse starts with field 1 (error_code): {body:?}"
    );
    ensure!(
        body.get(1) == Some(&2),
        "error code 2 (UnsupportedVersion): {body:?}"
    );

    // Oversized frame: that connection closes; the other one keeps working.
    let mut oversized = TcpStream::connect(addr).await?;
    oversized.write_all(&(1_000_000i32).to_be_bytes()).await?;
    ensure!(
        closed(&mut oversized).await,
        "oversized frame closes the connection"
    );
    // Negative length and a frame shorter than a header close their connections too.
    let mut negative = TcpStream::connect(addr).await?;
    negative.write_all(&(-5i32).to_be_bytes()).await?;
    ensure!(
        closed(&mut negative).await,
        "negative length closes the connection"
    );
    let mut short = TcpStream::connect(addr).await?;
    short.write_all(&[0, 0, 0, 3, 1, 2, 3]).await?;
    ensure!(
        closed(&mut short).await,
        "short frame closes the connection"
    );

    // ApiVersions (1000, empty body decodes to defaults) still answers on the good connection.
    good.write_all(&request(1000, 2, b"")).await?;
    let (kind, id, _) = response(&mut good).await?;
    ensure!(
        kind == 0 && id == 2,
        "ApiVersions succeeds after other connections failed"
    );

    // connections_max = 3: with three open, a fourth is closed on accept.
    let _second = TcpStream::connect(addr).await?;
    let _third = TcpStream::connect(addr).await?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut fourth = TcpStream::connect(addr).await?;
    ensure!(
        closed(&mut fourth).await,
        "connection beyond connections_max is closed"
    );

    server.shutdown().await?;
    Ok(())
}

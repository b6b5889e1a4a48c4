//! Exposure of a real `silt up`: the REST bearer token (no token and a wrong token get 401, the
//! right one gets through), SASL/PLAIN on the Fluss port (wrong and missing credentials are
//! refused with the error fluss-rs maps to AuthenticateException, the right ones work, and
//! tiering still reaches the lake because silt's own clients authenticate), and listeners that
//! warn when they are not on loopback.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use fluss::client::FlussConnection;
use fluss::rpc::FlussError;

use silt_testkit::process::SiltProcess;
use silt_testkit::{http, silt_bin, tables};

#[test]
fn rest_requires_the_configured_bearer_token() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let silt = SiltProcess::start_with_token(silt_bin!(), dir.path(), "s3cret-token")?;
    for (what, header) in [
        ("no token", None),
        ("wrong token", Some("Bearer s3cret-tokem")),
        ("token prefix", Some("Bearer s3cret")),
        ("not a bearer", Some("Basic czNjcmV0LXRva2Vu")),
        ("empty bearer", Some("Bearer ")),
    ] {
        let (status, body) = http::get(&silt.rest, "/v1/tables", header)?;
        ensure!(status == 401, "{what}: expected 401, got {status} {body}");
        ensure!(
            body.contains("bearer token"),
            "{what}: the error says what is missing: {body}"
        );
    }
    let (status, body) = http::get(&silt.rest, "/v1/tables", Some("Bearer s3cret-token"))?;
    ensure!(status == 200, "the right token: got {status} {body}");
    ensure!(body.trim_start().starts_with('['), "a table list: {body}");
    Ok(())
}

#[test]
fn rest_without_a_token_is_open() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let silt = SiltProcess::start(silt_bin!(), dir.path())?;
    let (status, body) = http::get(&silt.rest, "/v1/tables", None)?;
    ensure!(status == 200, "no token configured: got {status} {body}");
    Ok(())
}

async fn connect(
    bootstrap: &str,
    credentials: Option<(&str, &str)>,
) -> fluss::error::Result<FlussConnection> {
    let mut config = fluss::config::Config::default();
    config.bootstrap_servers = bootstrap.to_string();
    if let Some((username, password)) = credentials {
        config.security_protocol = "sasl".into();
        config.security_sasl_username = username.into();
        config.security_sasl_password = password.into();
    }
    FlussConnection::new(config).await
}

/// The error of connecting and listing databases, if any.
async fn refusal(
    bootstrap: &str,
    credentials: Option<(&str, &str)>,
) -> Option<fluss::error::Error> {
    match connect(bootstrap, credentials).await {
        Err(error) => Some(error),
        Ok(connection) => connection.get_admin().ok()?.list_databases().await.err(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sasl_on_the_fluss_port_refuses_strangers_and_still_tiers() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let silt = SiltProcess::start_with(
        silt_bin!(),
        dir.path(),
        &[],
        &[
            ("SILT_HOTSTORE__SASL__ENABLED", "true"),
            (
                "SILT_HOTSTORE__SASL__USERS",
                "[{username: silt-internal, password: in-pw}, {username: alice, password: wonder-land}]",
            ),
        ],
    )?;
    for (what, credentials) in [
        ("no credentials", None),
        ("wrong password", Some(("alice", "wonderland"))),
        ("unknown user", Some(("mallory", "wonder-land"))),
    ] {
        let error = refusal(&silt.bootstrap, credentials)
            .await
            .with_context(|| format!("{what} was let in"))?;
        ensure!(
            error.api_error() == Some(FlussError::AuthenticateException),
            "{what}: {error}"
        );
    }

    let client = connect(&silt.bootstrap, Some(("alice", "wonder-land"))).await?;
    let events = tables::events("sec").buckets(2).lake("300ms");
    events.create(&client).await?;
    tables::append_events(&client, &events.path, 0..200, |_| "x".to_string()).await?;

    // Tiering runs on silt's own (authenticated) clients: the lake catches up with all 200 rows.
    silt.wait_lake_rows("sec.events", 200, Duration::from_secs(60))
        .await?;
    let lake = dir
        .path()
        .join("lake")
        .join("sec")
        .join("events")
        .join("_delta_log");
    ensure!(lake.is_dir(), "a Delta table at {}", lake.display());
    Ok(())
}

#[test]
fn sasl_on_without_users_is_a_config_error() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let output = Command::new(env!("CARGO_BIN_EXE_silt"))
        .args([
            "--data-dir",
            &dir.path().to_string_lossy(),
            "up",
            "--run-for-s",
            "1",
        ])
        .env("SILT_HOTSTORE__LISTEN", "127.0.0.1:0")
        .env("SILT_REST__LISTEN", "127.0.0.1:0")
        .env("SILT_HOTSTORE__SASL__ENABLED", "true")
        .output()?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    ensure!(
        !output.status.success(),
        "silt up must refuse to start: {stderr}"
    );
    ensure!(
        stderr.contains("hotstore.sasl.users is empty"),
        "the error names the key: {stderr}"
    );
    Ok(())
}

#[test]
fn listeners_default_to_loopback_and_warn_beyond_it() -> Result<()> {
    let config = silt_jobs::config::Config::load(None, std::iter::empty(), &[])?;
    for (what, listen) in [
        ("hotstore", &config.hotstore.listen),
        ("rest", &config.rest.listen),
    ] {
        let addr: std::net::SocketAddr = listen.parse()?;
        ensure!(
            addr.ip().is_loopback(),
            "{what} listens on {addr} by default"
        );
    }

    let dir = tempfile::tempdir()?;
    let mut child = Command::new(env!("CARGO_BIN_EXE_silt"))
        .args([
            "--data-dir",
            &dir.path().to_string_lossy(),
            "--log",
            "warn",
            "up",
            "--run-for-s",
            "30",
        ])
        .env("SILT_HOTSTORE__LISTEN", "0.0.0.0:0")
        .env("SILT_REST__LISTEN", "0.0.0.0:0")
        // A port of its own: another silt on this machine may hold the default one.
        .env("SILT_QUERY__FLIGHT_LISTEN", "127.0.0.1:0")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let stderr = child.stderr.take().expect("piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let (mut hotstore, mut rest) = (false, false);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !(hotstore && rest) && Instant::now() < deadline {
        let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) else {
            continue;
        };
        hotstore |= line.contains("hotstore listens beyond loopback")
            && line.contains("hotstore.sasl.enabled");
        rest |= line.contains("REST API listens beyond loopback") && line.contains("rest.token");
    }
    let _ = child.kill();
    let _ = child.wait();
    ensure!(hotstore, "no warning for the hotstore on 0.0.0.0");
    ensure!(rest, "no warning for the REST API on 0.0.0.0");
    Ok(())
}

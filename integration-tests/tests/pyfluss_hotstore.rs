//! The official Python client (pyfluss) against silt's hotstore: starts the server in-process
//! and runs `integration-tests/python` with pytest against it. Skips, saying so, where python3,
//! pytest or pyfluss are missing (`pip install -r integration-tests/python/requirements.txt`).

use std::process::Command;

use anyhow::Result;
use silt_hotstore::{Server, ServerConfig};

fn skip(reason: &str) -> Result<()> {
    silt_testkit::skip("pyfluss_against_hotstore", reason)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pyfluss_against_hotstore() -> Result<()> {
    let probe = Command::new("python3")
        .args(["-c", "import fluss, pytest, pyarrow"])
        .output();
    match probe {
        Err(e) => return skip(&format!("python3 cannot run ({e})")),
        Ok(out) if !out.status.success() => {
            return skip(&format!(
                "pyfluss, pytest or pyarrow is not importable ({})",
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .last()
                    .unwrap_or_default()
            ));
        }
        Ok(_) => {}
    }
    let dir = tempfile::tempdir()?;
    let server = Server::start(ServerConfig {
        bind_addr: "127.0.0.1:0".parse().unwrap(),
        data_dir: dir.path().join("hotstore"),
        default_bucket_count: 3,
        ..ServerConfig::default()
    })
    .await?;
    let tests = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("python");
    let bootstrap = server.local_addr().to_string();
    let output = tokio::task::spawn_blocking(move || {
        Command::new("python3")
            .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
            .arg(&tests)
            .env("SILT_BOOTSTRAP", bootstrap)
            .output()
    })
    .await??;
    let stdout = String::from_utf8_lossy(&output.stdout);
    println!("{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(
        output.status.success(),
        "pyfluss tests failed against the hotstore:\n{stdout}"
    );
    // pytest exits 0 with every test skipped too: insist they ran.
    assert!(
        stdout.contains(" passed") && !stdout.contains("skipped"),
        "pyfluss tests did not all run:\n{stdout}"
    );
    server.shutdown().await?;
    Ok(())
}

//! A real headless browser for tests of the web console: Chromium driven by its chromedriver
//! over the W3C WebDriver protocol (plain HTTP and JSON, through [`crate::http`]).
//!
//! [`Browser::start`] skips, saying why, when `chromedriver` or `chromium` is not installed
//! (Debian: `apt-get install chromium chromium-driver`; `.ci/run` installs them where it can).
//! One session per browser; the driver process is killed when the browser is dropped.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use serde_json::{Value, json};

use crate::process::{ChildGuard, free_port};

/// A WebDriver session of a headless Chromium.
pub struct Browser {
    driver: String,
    session: String,
    _process: ChildGuard,
}

/// What [`Browser::start`] found.
pub enum Started {
    Running(Browser),
    Skipped(String),
}

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    })
}

impl Browser {
    /// Starts chromedriver on a free port and opens a headless session, or says why not.
    pub fn start() -> Result<Started> {
        let Some(chromedriver) = on_path("chromedriver") else {
            return Ok(Started::Skipped(
                "no chromedriver on PATH (Debian: apt-get install chromium chromium-driver)".into(),
            ));
        };
        let Some(chromium) = on_path("chromium").or_else(|| on_path("chromium-browser")) else {
            return Ok(Started::Skipped(
                "no chromium on PATH (Debian: apt-get install chromium chromium-driver)".into(),
            ));
        };
        let port = free_port()?;
        let process = ChildGuard(
            Command::new(&chromedriver)
                .arg(format!("--port={port}"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .with_context(|| format!("starting {}", chromedriver.display()))?,
        );
        let driver = format!("127.0.0.1:{port}");
        let mut ready = false;
        for _ in 0..100 {
            if let Ok((200, body)) = crate::http::get(&driver, "/status", None)
                && body.contains("\"ready\":true")
            {
                ready = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        ensure!(ready, "chromedriver on {driver} not ready within 10 s");
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": ["--headless", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1400,900"],
            },
        }}});
        let value = call(&driver, "POST", "/session", Some(capabilities))?;
        let session = value["sessionId"]
            .as_str()
            .with_context(|| format!("no session id in {value}"))?
            .to_string();
        Ok(Started::Running(Browser {
            driver,
            session,
            _process: process,
        }))
    }

    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value> {
        let path = format!("/session/{}{path}", self.session);
        call(&self.driver, method, &path, body)
    }

    /// Opens `url` (and waits for its load event, as WebDriver does).
    pub fn go(&self, url: &str) -> Result<()> {
        self.call("POST", "/url", Some(json!({ "url": url })))?;
        Ok(())
    }

    /// Runs `script` (a function body; `arguments` holds `args`) in the page; its return value.
    pub fn eval(&self, script: &str, args: Value) -> Result<Value> {
        self.call(
            "POST",
            "/execute/sync",
            Some(json!({ "script": script, "args": args })),
        )
    }

    /// Polls `script` every 100 ms until it returns something other than null or false; that.
    pub fn wait_for(&self, what: &str, script: &str, timeout: Duration) -> Result<Value> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let value = self.eval(script, json!([]))?;
            if !value.is_null() && value != Value::Bool(false) {
                return Ok(value);
            }
            if std::time::Instant::now() > deadline {
                let page = self.eval(
                    "return document.body ? document.body.innerText.slice(0, 2000) : ''",
                    json!([]),
                )?;
                bail!("{what} did not happen within {timeout:?}; the page shows:\n{page}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Clicks the element `css` selects.
    pub fn click(&self, css: &str) -> Result<()> {
        let element = self.find(css)?;
        self.call(
            "POST",
            &format!("/element/{element}/click"),
            Some(json!({})),
        )?;
        Ok(())
    }

    /// Types `text` into the element `css` selects, as key presses.
    pub fn type_into(&self, css: &str, text: &str) -> Result<()> {
        let element = self.find(css)?;
        self.call(
            "POST",
            &format!("/element/{element}/value"),
            Some(json!({ "text": text })),
        )?;
        Ok(())
    }

    fn find(&self, css: &str) -> Result<String> {
        let value = self.call(
            "POST",
            "/element",
            Some(json!({"using": "css selector", "value": css})),
        )?;
        value
            .as_object()
            .and_then(|o| o.values().next())
            .and_then(Value::as_str)
            .map(str::to_string)
            .with_context(|| format!("no element {css:?}: {value}"))
    }

    /// Writes a PNG of the window to `path`.
    pub fn screenshot(&self, path: &Path) -> Result<()> {
        use base64::Engine as _;
        let value = self.call("GET", "/screenshot", None)?;
        let png = base64::engine::general_purpose::STANDARD
            .decode(value.as_str().context("screenshot: not base64 text")?)?;
        std::fs::write(path, png).with_context(|| format!("writing {}", path.display()))
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.call("DELETE", "", None);
    }
}

/// One WebDriver call: its `value`, or the driver's error.
fn call(driver: &str, method: &str, path: &str, body: Option<Value>) -> Result<Value> {
    let (status, text) = match body {
        Some(body) => crate::http::send_json(driver, method, path, &body)?,
        None => crate::http::request(driver, method, path, None)?,
    };
    let answer: Value = serde_json::from_str(&text)
        .with_context(|| format!("{method} {path}: {status}, not JSON: {text:.300}"))?;
    ensure!(
        status == 200,
        "{method} {path}: {status} {}",
        answer["value"]
    );
    Ok(answer["value"].clone())
}

//! How commands print, the same rule for every one: the result a script wants on stdout (a job
//! id, a verdict, rows, a table), as text or as JSON (`--format json`: one JSON document and a
//! newline); what a person reads beside it (notes, summaries, progress) on stderr. Colour and
//! progress bars only where stderr is a terminal, and no colour under `NO_COLOR`
//! (<https://no-color.org>), so redirected output holds no escape codes.

use std::io::{IsTerminal as _, Write as _};

use anyhow::Result;
use serde::Serialize;

/// What a command prints on stdout: text for people, or JSON for scripts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Format {
    #[default]
    Text,
    Json,
}

/// Whether stderr is a terminal a person watches (where progress is drawn).
pub fn stderr_is_terminal() -> bool {
    std::io::stderr().is_terminal()
}

/// Whether what goes to stderr may carry ANSI colour: a terminal, and `NO_COLOR` unset or empty.
pub fn stderr_colour() -> bool {
    stderr_is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Writes `value` to stdout as one line of JSON.
pub fn print_json<T: Serialize + ?Sized>(value: &T) -> Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, value)?;
    writeln!(out)?;
    out.flush()?;
    Ok(())
}

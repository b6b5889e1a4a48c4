//! Progress of work that takes more than a moment (`silt verify` waiting for tiering and
//! reading both sides, the benches' phases): a bar or a spinner drawn with indicatif on stderr,
//! only when stderr is a terminal. Redirected, nothing is drawn; the command's summary line
//! says what happened. A [`Progress`] is also what another front end (the console's verify
//! action) can hand in and read back: its position, length and message.

use std::borrow::Cow;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressFinish, ProgressStyle};

/// How often a drawn bar redraws itself (its spinner and elapsed time) while nothing changes.
const TICK: Duration = Duration::from_millis(120);

/// A progress display; cheap to clone (clones show the same bar).
#[derive(Clone)]
pub struct Progress(ProgressBar);

impl Progress {
    /// Shows nothing, but keeps position, length and message for whoever reads them.
    pub fn hidden() -> Progress {
        Progress(ProgressBar::hidden())
    }

    /// `steps` steps (e.g. tables), drawn as `[2/5] message` on a terminal.
    pub fn steps(steps: u64) -> Progress {
        Progress::drawn(
            ProgressBar::new(steps),
            "{spinner} [{pos}/{len}] {wide_msg} {elapsed}",
        )
    }

    /// Work of unknown length, drawn as a spinner and a message on a terminal.
    pub fn spinner() -> Progress {
        Progress::drawn(ProgressBar::new_spinner(), "{spinner} {wide_msg} {elapsed}")
    }

    fn drawn(bar: ProgressBar, template: &str) -> Progress {
        if !crate::output::stderr_is_terminal() {
            bar.set_draw_target(ProgressDrawTarget::hidden());
            return Progress(bar);
        }
        bar.set_draw_target(ProgressDrawTarget::stderr());
        // Dropped on an early return (an error): cleared, so the error is not printed after a
        // stale bar.
        let bar = bar.with_finish(ProgressFinish::AndClear);
        let style = ProgressStyle::with_template(template)
            .expect("the progress templates are valid (a bug otherwise)");
        bar.set_style(style);
        bar.enable_steady_tick(TICK);
        Progress(bar)
    }

    pub fn set_message(&self, message: impl Into<Cow<'static, str>>) {
        self.0.set_message(message);
    }

    /// One step done.
    pub fn inc(&self) {
        self.0.inc(1);
    }

    pub fn message(&self) -> String {
        self.0.message()
    }

    pub fn position(&self) -> u64 {
        self.0.position()
    }

    pub fn length(&self) -> Option<u64> {
        self.0.length()
    }

    /// Whether anything is drawn (stderr is a terminal).
    pub fn is_drawn(&self) -> bool {
        !self.0.is_hidden()
    }

    /// Runs `f` with the bar cleared, so what it prints (to stdout or stderr) is not drawn over.
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        self.0.suspend(f)
    }

    /// Removes the bar from the terminal.
    pub fn finish(&self) {
        self.0.finish_and_clear();
    }
}

impl Default for Progress {
    fn default() -> Progress {
        Progress::hidden()
    }
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Progress")
            .field("position", &self.position())
            .field("length", &self.length())
            .field("message", &self.message())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hidden progress still answers what it was told: another front end reads it.
    #[test]
    fn a_hidden_progress_keeps_its_state() {
        let progress = Progress::hidden();
        progress.set_message("verifying demo.orders");
        progress.inc();
        assert_eq!(
            (progress.message(), progress.position(), progress.is_drawn()),
            ("verifying demo.orders".to_string(), 1, false)
        );
    }
}

//! The duration grammar of silt's flags, table properties (`table.datalake.freshness`) and
//! pipelines, after Fluss's: a number and a unit, `500ms`, `30s`, `3min`, `1 h`, `2d`; a bare
//! number is seconds. (Fluss's `table.log.ttl`, where a bare number is milliseconds and a
//! negative one means none, keeps its own rule beside the property in the hot store.)

use std::time::Duration;

/// Why a text is not a duration; the message names the text and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("{0:?} is not a duration (use e.g. 500ms, 30s, 3min, 1h)")]
    NotADuration(String),
    #[error("{text:?} has an unknown unit {unit:?} (use ms, s, min, h or d)")]
    UnknownUnit { text: String, unit: String },
    #[error("{0:?} is out of range (1ms to 365 days)")]
    OutOfRange(String),
}

/// Parses a duration of 1 ms to 365 days (see the module docs).
pub fn parse_duration(text: &str) -> Result<Duration, Error> {
    let t = text.trim().to_ascii_lowercase();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| Error::NotADuration(text.to_string()))?;
    let seconds = match unit.trim() {
        "ms" | "milli" | "millis" | "milliseconds" => value / 1000.0,
        "" | "s" | "sec" | "secs" | "second" | "seconds" => value,
        "m" | "min" | "mins" | "minute" | "minutes" => value * 60.0,
        "h" | "hour" | "hours" => value * 3600.0,
        "d" | "day" | "days" => value * 86400.0,
        other => {
            return Err(Error::UnknownUnit {
                text: text.to_string(),
                unit: other.to_string(),
            });
        }
    };
    if !(0.001..=31_536_000.0).contains(&seconds) {
        return Err(Error::OutOfRange(text.to_string()));
    }
    Ok(Duration::from_secs_f64(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_like_fluss() {
        let cases = [
            ("500ms", 500),
            ("30s", 30_000),
            ("3min", 180_000),
            ("1 h", 3_600_000),
            ("2", 2_000),
            ("1.5s", 1_500),
        ];
        for (text, ms) in cases {
            assert_eq!(parse_duration(text).unwrap().as_millis(), ms, "{text}");
        }
        for bad in ["", "soon", "3 fortnights", "0s", "-1s"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} should be rejected");
        }
    }
}

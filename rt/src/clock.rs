//! The wall clock as silt records it: milliseconds since the Unix epoch.

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in milliseconds since the Unix epoch (0 for a clock set before 1970).
pub fn now_ms() -> i64 {
    epoch_ms(SystemTime::now())
}

/// `at` in milliseconds since the Unix epoch (0 before it).
pub fn epoch_ms(at: SystemTime) -> i64 {
    at.duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_epoch_and_after() {
        assert_eq!(epoch_ms(UNIX_EPOCH), 0);
        assert_eq!(
            epoch_ms(UNIX_EPOCH + std::time::Duration::from_millis(1500)),
            1500
        );
        assert_eq!(epoch_ms(UNIX_EPOCH - std::time::Duration::from_secs(1)), 0);
        assert!(now_ms() > 1_700_000_000_000, "a clock in this century");
    }
}

//! Auto-partitioning as Fluss 0.9.1 defines it (`AutoPartitionStrategy`,
//! `AutoPartitionManager`, `TableDescriptorValidation.checkPartition`): the table properties,
//! what they must satisfy, and which partitions a table should have at an instant. They are
//! created and dropped on schedule by the `auto_partitions` task, above the service.
//!
//! - The time key (the only partition key, or `table.auto-partition.key` among several) takes
//!   values formatted by `table.auto-partition.time-unit`: HOUR `yyyyMMddHH`, DAY `yyyyMMdd`
//!   (the default), MONTH `yyyyMM`, QUARTER `yyyyQ`, YEAR `yyyy`, in
//!   `table.auto-partition.time-zone` (default: the server's time zone).
//! - Pre-created: the current unit and the `num-precreate - 1` after it (default 2: today and
//!   tomorrow). A table with several partition keys pre-creates none: Fluss refuses a
//!   `num-precreate` above 0 there, and stores 0 when it is not set.
//! - Expired: a partition whose time value sorts before the value of `num-retention` units ago
//!   (default 7; negative keeps every partition). Values compare as strings, as in Fluss, so
//!   the current unit and the `num-retention` units before it are kept.

use crate::protocol::{ApiError, code};
use fluss::metadata::TableDescriptor;
use jiff::tz::{Offset, TimeZone};
use jiff::{Span, Timestamp, Zoned};
use std::collections::HashMap;

/// Fluss's separator of partition values in a partition name.
pub const PARTITION_NAME_SEPARATOR: char = '$';

pub(crate) const ENABLED: &str = "table.auto-partition.enabled";
pub(crate) const KEY: &str = "table.auto-partition.key";
pub(crate) const TIME_UNIT: &str = "table.auto-partition.time-unit";
pub(crate) const NUM_PRECREATE: &str = "table.auto-partition.num-precreate";
pub(crate) const NUM_RETENTION: &str = "table.auto-partition.num-retention";
pub(crate) const TIME_ZONE: &str = "table.auto-partition.time-zone";
const NUM_PRECREATE_DEFAULT: i32 = 2;
const NUM_RETENTION_DEFAULT: i32 = 7;

/// Fluss's `AutoPartitionTimeUnit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TimeUnit {
    Hour,
    Day,
    Month,
    Quarter,
    Year,
}

impl TimeUnit {
    /// As Fluss reads an enum option: the name, case-insensitively.
    fn parse(text: &str) -> Option<TimeUnit> {
        let unit = match text.trim().to_ascii_uppercase().as_str() {
            "HOUR" => TimeUnit::Hour,
            "DAY" => TimeUnit::Day,
            "MONTH" => TimeUnit::Month,
            "QUARTER" => TimeUnit::Quarter,
            "YEAR" => TimeUnit::Year,
            _ => return None,
        };
        Some(unit)
    }

    /// The partition value of the unit `units` away from `at` (Fluss's
    /// `PartitionUtils.generateAutoPartitionTime`): hours move along the timeline, days,
    /// months, quarters and years along the calendar of `at`'s time zone.
    fn value(self, at: &Zoned, units: i64) -> Result<String, jiff::Error> {
        let span = match self {
            TimeUnit::Hour => Span::new().try_hours(units)?,
            TimeUnit::Day => Span::new().try_days(units)?,
            TimeUnit::Month => Span::new().try_months(units)?,
            TimeUnit::Quarter => Span::new().try_months(units.saturating_mul(3))?,
            TimeUnit::Year => Span::new().try_years(units)?,
        };
        let t = at.checked_add(span)?;
        Ok(match self {
            TimeUnit::Hour => format!(
                "{:04}{:02}{:02}{:02}",
                t.year(),
                t.month(),
                t.day(),
                t.hour()
            ),
            TimeUnit::Day => format!("{:04}{:02}{:02}", t.year(), t.month(), t.day()),
            TimeUnit::Month => format!("{:04}{:02}", t.year(), t.month()),
            TimeUnit::Quarter => format!("{:04}{}", t.year(), (t.month() - 1) / 3 + 1),
            TimeUnit::Year => format!("{:04}", t.year()),
        })
    }
}

/// A table's auto-partitioning, read from its properties.
#[derive(Debug, Clone)]
pub(crate) struct AutoPartitionStrategy {
    /// The time key's index among the table's partition keys.
    pub key_index: usize,
    pub unit: TimeUnit,
    /// Partitions that exist ahead of time: the current unit's and the ones after it.
    pub num_precreate: i32,
    /// Past units whose partitions are kept; negative keeps every partition.
    pub num_retention: i32,
    pub time_zone: TimeZone,
}

impl AutoPartitionStrategy {
    /// The strategy of a table, `None` when auto-partitioning is off. Every auto-partition
    /// property present is checked, as Fluss checks table options whether or not they are in
    /// use; an error names the property and the fix.
    pub fn of(
        table: &str,
        descriptor: &TableDescriptor,
    ) -> Result<Option<AutoPartitionStrategy>, ApiError> {
        let properties = descriptor.properties();
        let options = Options::parse(table, properties)?;
        let keys = descriptor.partition_keys();
        if !options.enabled {
            return Ok(None);
        }
        if keys.is_empty() {
            return Err(ApiError::new(
                code::INVALID_CONFIG,
                format!(
                    "table {table}: auto partition is only supported for partitioned tables; set \
                     '{ENABLED}' to false or partition the table"
                ),
            ));
        }
        Ok(Some(AutoPartitionStrategy {
            key_index: time_key_index(table, keys, properties)?,
            unit: options.unit,
            num_precreate: precreate_count(table, keys, options.num_precreate)?,
            num_retention: options.num_retention,
            time_zone: options.time_zone,
        }))
    }

    /// The partition names to exist at `now_ms`: the current unit's and the
    /// `num_precreate - 1` after it (none for a table with several partition keys, whose
    /// `num_precreate` is 0).
    pub fn to_precreate(&self, now_ms: i64) -> Result<Vec<String>, jiff::Error> {
        let now = self.zoned(now_ms)?;
        (0..i64::from(self.num_precreate.max(0)))
            .map(|units| self.unit.value(&now, units))
            .collect()
    }

    /// The oldest time value kept at `now_ms`; a partition whose time value sorts before it
    /// has expired. `None` when partitions never expire (negative `num_retention`).
    pub fn kept_from(&self, now_ms: i64) -> Result<Option<String>, jiff::Error> {
        if self.num_retention < 0 {
            return Ok(None);
        }
        let now = self.zoned(now_ms)?;
        self.unit
            .value(&now, -i64::from(self.num_retention))
            .map(Some)
    }

    /// The value of the time key in a partition's name.
    pub fn time_value<'a>(&self, partition_name: &'a str) -> &'a str {
        partition_name
            .split(PARTITION_NAME_SEPARATOR)
            .nth(self.key_index)
            .unwrap_or_default()
    }

    fn zoned(&self, now_ms: i64) -> Result<Zoned, jiff::Error> {
        Ok(Timestamp::from_millisecond(now_ms)?.to_zoned(self.time_zone.clone()))
    }
}

/// The auto-partition properties of a table as given, each checked whether or not it is in
/// use.
struct Options {
    enabled: bool,
    unit: TimeUnit,
    /// As given; its default depends on the partition keys ([`precreate_count`]).
    num_precreate: Option<i32>,
    num_retention: i32,
    time_zone: TimeZone,
}

impl Options {
    fn parse(table: &str, properties: &HashMap<String, String>) -> Result<Options, ApiError> {
        let invalid = |key: &str, value: &str, fix: &str| {
            ApiError::new(
                code::INVALID_CONFIG,
                format!("invalid value '{value}' for '{key}' of table {table}: {fix}"),
            )
        };
        let enabled = match properties
            .get(ENABLED)
            .map(|v| v.trim().to_ascii_lowercase())
        {
            None => false,
            Some(v) if v == "true" => true,
            Some(v) if v == "false" => false,
            Some(_) => {
                return Err(invalid(
                    ENABLED,
                    &properties[ENABLED],
                    "use 'true' or 'false'",
                ));
            }
        };
        let unit = match properties.get(TIME_UNIT) {
            None => TimeUnit::Day,
            Some(text) => TimeUnit::parse(text)
                .ok_or_else(|| invalid(TIME_UNIT, text, "use HOUR, DAY, MONTH, QUARTER or YEAR"))?,
        };
        let integer = |key: &str| match properties.get(key) {
            None => Ok(None),
            Some(text) => text
                .trim()
                .parse::<i32>()
                .map(Some)
                .map_err(|_| invalid(key, text, "use an integer such as 2")),
        };
        let num_precreate = integer(NUM_PRECREATE)?;
        let num_retention = integer(NUM_RETENTION)?.unwrap_or(NUM_RETENTION_DEFAULT);
        let time_zone = match properties.get(TIME_ZONE) {
            None => TimeZone::system(),
            Some(text) => parse_time_zone(text).map_err(|reason| {
                invalid(
                    TIME_ZONE,
                    text,
                    &format!(
                        "{reason}; use an IANA name such as 'Asia/Shanghai' or 'UTC', or a \
                         fixed offset such as '+08:00'"
                    ),
                )
            })?,
        };
        Ok(Options {
            enabled,
            unit,
            num_precreate,
            num_retention,
            time_zone,
        })
    }
}

fn invalid_table(table: &str, reason: String) -> ApiError {
    ApiError::new(code::INVALID_TABLE, format!("table {table}: {reason}"))
}

/// Which of the partition `keys` holds the time: the only one, or the one `KEY` names.
fn time_key_index(
    table: &str,
    keys: &[String],
    properties: &HashMap<String, String>,
) -> Result<usize, ApiError> {
    if keys.len() == 1 {
        return Ok(0);
    }
    let Some(key) = properties.get(KEY).filter(|k| !k.trim().is_empty()) else {
        return Err(invalid_table(
            table,
            format!(
                "an auto-partitioned table with several partition keys {keys:?} must name \
                 its time key; set '{KEY}' to one of them"
            ),
        ));
    };
    keys.iter().position(|k| k == key).ok_or_else(|| {
        invalid_table(
            table,
            format!("'{KEY}' is '{key}', which is not a partition key; use one of {keys:?}"),
        )
    })
}

/// The partitions to pre-create: as asked (by default [`NUM_PRECREATE_DEFAULT`]) with one
/// partition key, none with several (the other keys have no values to create them with).
fn precreate_count(
    table: &str,
    keys: &[String],
    num_precreate: Option<i32>,
) -> Result<i32, ApiError> {
    match (keys.len(), num_precreate) {
        (1, precreate) => Ok(precreate.unwrap_or(NUM_PRECREATE_DEFAULT)),
        (_, None | Some(0)) => Ok(0),
        (_, Some(precreate)) => Err(invalid_table(
            table,
            format!(
                "'{NUM_PRECREATE}' is {precreate}, but a table with several partition keys \
                 {keys:?} cannot pre-create partitions (the other keys have no values to \
                 create them with); set it to 0"
            ),
        )),
    }
}

/// A time zone as Fluss users write it: an IANA name (`Asia/Shanghai`, `UTC`), or a fixed
/// offset, bare or after `UTC` / `GMT` (`+08:00`, `-0530`, `GMT+8`). Unlike Java's
/// `TimeZone.getTimeZone`, which takes an unknown name for GMT, an unknown name is refused.
fn parse_time_zone(text: &str) -> Result<TimeZone, String> {
    let name = text.trim();
    if ["Z", "UTC", "GMT"]
        .iter()
        .any(|z| name.eq_ignore_ascii_case(z))
    {
        return Ok(TimeZone::UTC);
    }
    let offset = ["UTC", "GMT", ""]
        .iter()
        .find_map(|prefix| name.strip_prefix(prefix))
        .filter(|rest| rest.starts_with(['+', '-']));
    match offset {
        Some(offset) => parse_offset(offset).map(TimeZone::fixed),
        None => TimeZone::get(name).map_err(|error| format!("unknown time zone: {error}")),
    }
}

/// `+8`, `+08`, `+0830`, `+08:30` and their negatives.
fn parse_offset(text: &str) -> Result<Offset, String> {
    let bad = || format!("'{text}' is not an offset like +08:00");
    let (sign, digits) = text.split_at(1);
    let sign = if sign == "-" { -1 } else { 1 };
    let (hours, minutes) = match digits.split_once(':') {
        Some((h, m)) => (h, m),
        None if digits.len() > 2 => digits.split_at(digits.len() - 2),
        None => (digits, "0"),
    };
    let all_digits =
        |s: &str| !s.is_empty() && s.len() <= 2 && s.bytes().all(|b| b.is_ascii_digit());
    if !all_digits(hours) || !all_digits(minutes) {
        return Err(bad());
    }
    let hours: i32 = hours.parse().map_err(|_| bad())?;
    let minutes: i32 = minutes.parse().map_err(|_| bad())?;
    if hours > 18 || minutes > 59 {
        return Err(bad());
    }
    Offset::from_seconds(sign * (hours * 3600 + minutes * 60)).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;
    use fluss::metadata::DataTypes;

    /// `(dt STRING, region STRING, id INT)` partitioned by `keys`, with `properties`.
    fn descriptor(keys: &[&str], properties: &[(&str, &str)]) -> TableDescriptor {
        let columns = [
            ("dt", DataTypes::string()),
            ("region", DataTypes::string()),
            ("id", DataTypes::int()),
        ];
        crate::test_server::partitioned_table(&columns, keys, properties)
    }

    fn strategy(keys: &[&str], properties: &[(&str, &str)]) -> AutoPartitionStrategy {
        let mut all = vec![(ENABLED, "true"), (TIME_ZONE, "UTC")];
        all.extend_from_slice(properties);
        AutoPartitionStrategy::of("fluss.t", &descriptor(keys, &all))
            .unwrap()
            .expect("enabled")
    }

    fn ms(rfc3339: &str) -> i64 {
        rfc3339.parse::<Timestamp>().unwrap().as_millisecond()
    }

    /// Fluss's `AutoPartitionManagerTest` cases (num-precreate 4, num-retention 2): at the
    /// start the first four units exist; later the current unit and the two before it are
    /// kept, and the partitions before them expire.
    #[test]
    fn partitions_are_named_pre_created_and_expire_as_in_fluss() {
        // (unit, start, pre-created at the start, later, oldest value kept then)
        #[rustfmt::skip]
        let cases = [
            ("HOUR", "2024-09-10T01:00:00Z", ["2024091001", "2024091002", "2024091003", "2024091004"], "2024-09-10T04:00:00Z", "2024091002"),
            ("DAY", "2024-09-10T00:00:00Z", ["20240910", "20240911", "20240912", "20240913"], "2024-09-13T23:00:00Z", "20240911"),
            ("MONTH", "2024-09-10T00:00:00Z", ["202409", "202410", "202411", "202412"], "2024-12-10T00:00:00Z", "202410"),
            ("quarter", "2024-09-10T00:00:00Z", ["20243", "20244", "20251", "20252"], "2025-03-10T00:00:00Z", "20243"),
            ("Year", "2024-09-10T00:00:00Z", ["2024", "2025", "2026", "2027"], "2027-01-01T00:00:00Z", "2025"),
        ];
        for (unit, start, precreated, later, kept_from) in cases {
            let s = strategy(
                &["dt"],
                &[
                    (TIME_UNIT, unit),
                    (NUM_PRECREATE, "4"),
                    (NUM_RETENTION, "2"),
                ],
            );
            assert_eq!(s.to_precreate(ms(start)).unwrap(), precreated, "{unit}");
            assert_eq!(
                s.kept_from(ms(later)).unwrap().as_deref(),
                Some(kept_from),
                "{unit}"
            );
        }
    }

    #[test]
    fn defaults_time_zones_and_several_keys() {
        let s = strategy(&["dt"], &[]);
        assert_eq!(
            (s.unit, s.num_precreate, s.num_retention),
            (TimeUnit::Day, 2, 7)
        );
        // 2024-05-01 20:30 UTC is May 2nd in Shanghai and at +05:30, still May 1st at -03:00.
        let at = ms("2024-05-01T20:30:00Z");
        for (zone, today) in [
            ("UTC", "20240501"),
            ("Asia/Shanghai", "20240502"),
            ("+05:30", "20240502"),
            ("GMT+8", "20240502"),
            ("UTC-0300", "20240501"),
        ] {
            let s = strategy(&["dt"], &[(TIME_ZONE, zone)]);
            assert_eq!(s.to_precreate(at).unwrap()[0], today, "{zone}");
        }
        let never = strategy(&["dt"], &[(NUM_RETENTION, "-1")]);
        assert_eq!(never.kept_from(at).unwrap(), None);
        // Several keys: the time key is named, nothing is pre-created, and a partition's time
        // value is its value of that key.
        let several = strategy(&["region", "dt"], &[(KEY, "dt")]);
        assert_eq!(several.num_precreate, 0);
        assert!(several.to_precreate(at).unwrap().is_empty());
        assert_eq!(several.time_value("eu$20240501"), "20240501");
        let disabled = descriptor(&["dt"], &[(ENABLED, "false"), (TIME_UNIT, "HOUR")]);
        assert!(
            AutoPartitionStrategy::of("fluss.t", &disabled)
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn bad_properties_name_the_problem_and_the_fix() {
        let check = |keys: &[&str], properties: &[(&str, &str)], expected: i32, words: &str| {
            let mut all = vec![(ENABLED, "true")];
            all.extend_from_slice(properties);
            // A later duplicate key wins in the builder, so ENABLED=yes overrides true.
            let error = AutoPartitionStrategy::of("fluss.t", &descriptor(keys, &all))
                .expect_err("must be refused");
            assert!(
                error.code == expected && error.message.contains(words),
                "{properties:?}: {} {}",
                error.code,
                error.message
            );
        };
        // (property, words of the message) refused as INVALID_CONFIG for a table by dt
        let values = [
            ((TIME_UNIT, "WEEK"), "use HOUR, DAY"),
            ((NUM_PRECREATE, "two"), "integer"),
            ((NUM_RETENTION, "1.5"), "integer"),
            ((TIME_ZONE, "Mars/Olympus"), "IANA name"),
            ((TIME_ZONE, "+25:00"), "+08:00"),
            ((ENABLED, "yes"), "'true' or 'false'"),
        ];
        for (property, words) in values {
            check(&["dt"], &[property], code::INVALID_CONFIG, words);
        }
        // (properties, words) refused as INVALID_TABLE for a table by dt and region
        let time_keys: [(&[(&str, &str)], &str); 3] = [
            (&[], KEY),
            (&[(KEY, "id")], "not a partition key"),
            (&[(KEY, "dt"), (NUM_PRECREATE, "2")], "set it to 0"),
        ];
        for (properties, words) in time_keys {
            check(&["dt", "region"], properties, code::INVALID_TABLE, words);
        }
        let words = "only supported for partitioned tables";
        check(&[], &[], code::INVALID_CONFIG, words);
    }
}

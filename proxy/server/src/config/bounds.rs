//! Bounds of numeric settings: each field's whole range checked in one place, one wording for every
//! error.
//!
//! Every capacity, size, count and duration has an upper bound, so that a typo cannot make tokentap
//! allocate gigabytes at start or wait for days (README.md lists the bounds).

use std::ops::RangeInclusive;

use super::{invalid, ConfigError};

pub(super) const MIB: u64 = 1 << 20;
pub(super) const GIB: u64 = 1 << 30;
/// A day in seconds: the longest wait most durations allow.
pub(super) const DAY_S: u64 = 86_400;
/// An hour in milliseconds.
pub(super) const HOUR_MS: u64 = 3_600_000;
/// The longest list (routes, origins, hosts, header names) a config may hold.
pub(super) const MAX_LIST_LEN: u64 = 1000;

/// `value` must lie in `range`; the error names the key and the side it crossed.
pub(super) fn check(key: &str, value: u64, range: RangeInclusive<u64>) -> Result<(), ConfigError> {
    let (min, max) = (*range.start(), *range.end());
    if value < min {
        let reason = if min == 1 {
            "must be greater than 0".to_string()
        } else {
            format!("{value} is less than the minimum, {min}")
        };
        return Err(invalid(key, reason));
    }
    if value > max {
        return Err(invalid(key, format!("{value} is larger than the maximum, {max}")));
    }
    Ok(())
}

/// Several fields, in order: the first out of its range is the error.
pub(super) fn check_all(fields: &[(&str, u64, RangeInclusive<u64>)]) -> Result<(), ConfigError> {
    fields.iter().try_for_each(|(key, value, range)| check(key, *value, range.clone()))
}

/// A rate per second: a finite number greater than 0 and at most `max`.
pub(super) fn check_rate(key: &str, value: f64, max: f64) -> Result<(), ConfigError> {
    if !(value > 0.0 && value.is_finite()) {
        return Err(invalid(key, "must be greater than 0"));
    }
    if value > max {
        return Err(invalid(key, format!("{value} is larger than the maximum, {max}")));
    }
    Ok(())
}

/// A list's length (a list is never longer than [`MAX_LIST_LEN`]).
pub(super) fn check_list<T>(key: &str, list: &[T]) -> Result<(), ConfigError> {
    check(key, list.len() as u64, 0..=MAX_LIST_LEN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_sides_of_a_range_are_named() {
        let err = |key, value, range| check(key, value, range).unwrap_err().to_string();
        assert_eq!(err("a.b", 0, 1..=5), "invalid value for `a.b`: must be greater than 0");
        assert_eq!(err("a.b", 3, 4..=5), "invalid value for `a.b`: 3 is less than the minimum, 4");
        assert_eq!(err("a.b", 6, 0..=5), "invalid value for `a.b`: 6 is larger than the maximum, 5");
        assert!(check("a.b", 5, 0..=5).is_ok() && check("a.b", 1, 1..=1).is_ok());
        assert!(check_rate("r", f64::NAN, 10.0).is_err() && check_rate("r", f64::INFINITY, 1e300).is_err());
        assert!(check_rate("r", 10.0, 10.0).is_ok());
    }
}

//! Durations in Go's `time.ParseDuration` syntax, which Concourse uses for a
//! cache's `ttl`, a step's `timeout` and a resource's `check_every`: an optional sign, then one or more decimal numbers (with
//! an optional fraction) each followed by a unit `ns`, `us` (`µs`, `μs`),
//! `ms`, `s`, `m` or `h` (`1h30m`, `1.5h`, `300ms`); `0` alone needs none.

use std::time::Duration;

/// A parsed duration: negative ones are kept apart so that callers can
/// refuse them by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GoDuration {
    /// Zero or more.
    NonNegative(Duration),
    /// Less than zero.
    Negative(Duration),
}

/// Parses `s` as Go does; the error reads like Go's.
pub fn parse_go_duration(s: &str) -> Result<GoDuration, String> {
    let invalid = || format!("time: invalid duration {s:?}");
    let (negative, mut rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if rest == "0" {
        return Ok(GoDuration::NonNegative(Duration::ZERO));
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let int_end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (int, after) = rest.split_at(int_end);
        let (frac, after) = match after.strip_prefix('.') {
            Some(a) => {
                let end = a.find(|c: char| !c.is_ascii_digit()).unwrap_or(a.len());
                a.split_at(end)
            }
            None => ("", after),
        };
        if int.is_empty() && frac.is_empty() {
            return Err(invalid());
        }
        let unit_end = after
            .find(|c: char| c == '.' || c.is_ascii_digit())
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_end);
        let nanos_per: u128 = match unit {
            "" => return Err(format!("time: missing unit in duration {s:?}")),
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return Err(format!("time: unknown unit {unit:?} in duration {s:?}")),
        };
        let whole: u128 = if int.is_empty() {
            0
        } else {
            int.parse().map_err(|_| invalid())?
        };
        let mut part = whole.checked_mul(nanos_per).ok_or_else(invalid)?;
        // The fraction, to nanosecond precision (Go truncates likewise).
        let mut scale = nanos_per;
        for d in frac.bytes() {
            scale /= 10;
            if scale == 0 {
                break;
            }
            part += u128::from(d - b'0') * scale;
        }
        total = total.checked_add(part).ok_or_else(invalid)?;
        if total > i64::MAX as u128 {
            return Err(invalid());
        }
        rest = after;
    }
    let d = Duration::from_nanos(total as u64);
    Ok(if negative && total > 0 {
        GoDuration::Negative(d)
    } else {
        GoDuration::NonNegative(d)
    })
}

/// A duration that must not be negative (timeouts, intervals): a negative
/// one is refused by name.
pub fn parse_non_negative(text: &str) -> Result<Duration, String> {
    let parsed = parse_go_duration(text).map_err(|e| {
        let why = e.trim_start_matches("time: ");
        format!("invalid duration {text:?}: {why} (e.g. 90s, 10m, 1h30m)")
    })?;
    match parsed {
        GoDuration::NonNegative(d) => Ok(d),
        GoDuration::Negative(_) => Err(format!("invalid duration {text:?}: must not be negative")),
    }
}

/// `d` as Go's `time.Duration.String` writes it, to millisecond
/// precision (`2m0s`, `1h0m0s`, `1.5s`, `300ms`): how durations are named
/// in messages.
pub fn format_go_duration(d: Duration) -> String {
    if d.is_zero() {
        return "0s".into();
    }
    if d < Duration::from_secs(1) {
        return format!("{}ms", d.as_millis());
    }
    let total = d.as_secs();
    let (h, m, s) = (total / 3600, total / 60 % 60, total % 60);
    let secs = match d.subsec_millis() {
        0 => format!("{s}s"),
        ms => format!("{s}.{}s", format!("{ms:03}").trim_end_matches('0')),
    };
    match (h, m) {
        (0, 0) => secs,
        (0, m) => format!("{m}m{secs}"),
        (h, m) => format!("{h}h{m}m{secs}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(s: &str) -> Duration {
        match parse_go_duration(s) {
            Ok(GoDuration::NonNegative(d)) => d,
            other => panic!("{s}: {other:?}"),
        }
    }

    #[test]
    fn durations_are_written_as_go_writes_them() {
        let f = |ms: u64| format_go_duration(Duration::from_millis(ms));
        assert_eq!(f(120_000), "2m0s");
        assert_eq!(f(3_000), "3s");
        assert_eq!(f(1_500), "1.5s");
        assert_eq!(f(300), "300ms");
        assert_eq!(f(0), "0s");
        assert_eq!(f(3_723_000), "1h2m3s");
        // Written, then read back, it is the same duration.
        assert_eq!(ok(&f(3_723_250)), Duration::from_millis(3_723_250));
    }

    #[test]
    fn go_syntax_parses() {
        assert_eq!(ok("24h"), Duration::from_secs(86400));
        assert_eq!(ok("1h30m"), Duration::from_secs(5400));
        assert_eq!(ok("1.5h"), Duration::from_secs(5400));
        assert_eq!(ok("500ms"), Duration::from_millis(500));
        assert_eq!(ok("2m3.5s"), Duration::from_millis(123_500));
        assert_eq!(ok(".5s"), Duration::from_millis(500));
        assert_eq!(ok("1us"), Duration::from_micros(1));
        assert_eq!(ok("1µs"), Duration::from_micros(1));
        assert_eq!(ok("0"), Duration::ZERO);
        assert_eq!(ok("+5s"), Duration::from_secs(5));
        assert_eq!(
            parse_go_duration("-1s"),
            Ok(GoDuration::Negative(Duration::from_secs(1)))
        );
    }

    #[test]
    fn bad_durations_are_refused_as_go_refuses_them() {
        for (s, why) in [
            ("notaduration", "invalid duration"),
            ("5", "missing unit"),
            ("1d", "unknown unit \"d\""),
            ("", "invalid duration"),
            ("-", "invalid duration"),
            (".s", "invalid duration"),
            ("3000000h", "invalid duration"),
        ] {
            let e = parse_go_duration(s).unwrap_err();
            assert!(e.contains(why), "{s:?}: {e}");
        }
    }

    #[test]
    fn go_durations_parse() {
        assert_eq!(parse_non_negative("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_non_negative("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_non_negative("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_non_negative("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_non_negative("0"), Ok(Duration::ZERO));
        assert_eq!(parse_non_negative("2m3s4us"), Ok(Duration::new(123, 4000)));
    }

    #[test]
    fn bad_durations_are_named() {
        for bad in ["", "90", "5d", "1h-", "s", "1..5s", "-1s", "forever"] {
            let e = parse_non_negative(bad).unwrap_err();
            assert!(e.contains(&format!("{bad:?}")), "{bad}: {e}");
        }
    }
}

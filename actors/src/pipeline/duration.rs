//! Go's duration syntax (`time.ParseDuration`), which Concourse uses for
//! `timeout`, `check_every` and `check_timeout`: `90s`, `1h30m`, `1.5h`,
//! `300ms`, `0`.

use std::time::Duration;

/// Parses a Go duration (`1h30m`, `90s`, `1.5h`, `250ms`, `0`); negative
/// durations are refused, as no Concourse field means anything by them.
pub fn parse_go_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("invalid duration {text:?} (expected e.g. 90s, 10m, 1h30m)");
    let mut s = text.trim();
    if let Some(rest) = s.strip_prefix('+') {
        s = rest;
    }
    if s.starts_with('-') {
        return Err(format!("invalid duration {text:?}: must not be negative"));
    }
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err(bad());
    }
    let mut total = 0f64;
    while !s.is_empty() {
        let num_len = s
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(s.len());
        let (num, rest) = s.split_at(num_len);
        if num.is_empty() || num == "." || num.matches('.').count() > 1 {
            return Err(bad());
        }
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let (unit, rest) = rest.split_at(unit_len);
        let nanos_per = match unit {
            "ns" => 1e0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            "" => {
                return Err(format!(
                    "invalid duration {text:?}: missing unit (ns, us, ms, s, m, h)"
                ))
            }
            _ => {
                return Err(format!(
                    "invalid duration {text:?}: unknown unit {unit:?} (ns, us, ms, s, m, h)"
                ))
            }
        };
        let n: f64 = num.parse().map_err(|_| bad())?;
        total += n * nanos_per;
        s = rest;
    }
    if total > u64::MAX as f64 {
        return Err(format!("invalid duration {text:?}: too long"));
    }
    Ok(Duration::from_nanos(total as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_parse() {
        assert_eq!(parse_go_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_go_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_go_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_go_duration("2m3s4us"), Ok(Duration::new(123, 4000)));
    }

    #[test]
    fn bad_durations_are_named() {
        for bad in ["", "90", "5d", "1h-", "s", "1..5s", "-1s", "forever"] {
            let e = parse_go_duration(bad).unwrap_err();
            assert!(e.contains(&format!("{bad:?}")), "{bad}: {e}");
        }
    }
}

//! The duration flags' parser (`--timeout`, `token create --expires`).

/// Parses `90`, `90s`, `10m`, `1h` or `30d` into seconds.
pub(super) fn parse_duration_secs(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration (e.g. 90s, 10m, 1h)"))?;
    let mult = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86400,
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (use s, m, h or d)")),
    };
    match n.saturating_mul(mult) {
        0 => Err("a duration must be longer than 0s".into()),
        secs => Ok(secs),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn durations_parse_with_units() {
        assert_eq!(super::parse_duration_secs("90"), Ok(90));
        assert_eq!(super::parse_duration_secs("10m"), Ok(600));
        assert_eq!(super::parse_duration_secs("1h"), Ok(3600));
        assert!(super::parse_duration_secs("0s").is_err());
        assert_eq!(super::parse_duration_secs("2d"), Ok(172_800));
        assert!(super::parse_duration_secs("5w")
            .unwrap_err()
            .contains("unknown unit"));
        assert!(super::parse_duration_secs("x").is_err());
    }
}

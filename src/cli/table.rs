//! The CLI's tables: columns padded to their widest cell, each cell cut to
//! [`MAX_CELL`] characters (with `…`) unless `--wide` asks for whole
//! cells, control characters shown as spaces, so no cell (a 70,000-character
//! description, a stored worker name from before the name rule) can break
//! a table or its formatting. `--json` prints every field whole.

use std::sync::atomic::{AtomicBool, Ordering};

/// The most characters a cell shows without `--wide`.
pub const MAX_CELL: usize = 60;

/// Whether `--wide` was given (set once, before any table is printed).
static WIDE: AtomicBool = AtomicBool::new(false);

/// Shows whole cells from now on (`--wide`).
pub fn set_wide(wide: bool) {
    WIDE.store(wide, Ordering::Relaxed);
}

/// `text` on one line (control characters as spaces), cut to `max`
/// characters with a trailing `…` when longer.
pub fn shorten(text: &str, max: usize) -> String {
    let one_line = |c: char| if c.is_control() { ' ' } else { c };
    if text.chars().count() <= max {
        return text.chars().map(one_line).collect();
    }
    let mut cut: String = text
        .chars()
        .take(max.saturating_sub(1))
        .map(one_line)
        .collect();
    cut.push('…');
    cut
}

/// Prints a table: the header, then each row, columns two spaces apart.
pub fn print_table(header: &[&str], rows: Vec<Vec<String>>) {
    let max = if WIDE.load(Ordering::Relaxed) {
        usize::MAX
    } else {
        MAX_CELL
    };
    let rows: Vec<Vec<String>> = rows
        .into_iter()
        .map(|r| r.iter().map(|c| shorten(c, max)).collect())
        .collect();
    for line in render(header, &rows) {
        crate::outln!("{line}");
    }
}

/// The table's lines. Padding is counted by hand (in characters), not with
/// a format width, which panics past 65,535.
fn render(header: &[&str], rows: &[Vec<String>]) -> Vec<String> {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(c.chars().count());
            }
        }
    }
    let line = |cells: Vec<&str>| {
        let mut text = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i > 0 {
                text.push_str("  ");
            }
            text.push_str(c);
            let pad = widths.get(i).copied().unwrap_or(0);
            text.extend(std::iter::repeat_n(
                ' ',
                pad.saturating_sub(c.chars().count()),
            ));
        }
        text.trim_end().to_string()
    };
    let mut lines = vec![line(header.to_vec())];
    lines.extend(
        rows.iter()
            .map(|r| line(r.iter().map(String::as_str).collect())),
    );
    lines
}

/// A JSON field as a table cell: strings bare, null empty.
pub fn cell(v: &serde_json::Value, key: &str) -> String {
    match &v[key] {
        serde_json::Value::Null => String::new(),
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_cells_are_cut_and_never_break_the_table() {
        let long = "d".repeat(70_000);
        assert_eq!(shorten(&long, MAX_CELL).chars().count(), MAX_CELL);
        assert!(shorten(&long, MAX_CELL).ends_with('…'));
        assert_eq!(shorten("a\nb", 10), "a b");
        // Whole cells (--wide) of any length render without a panic.
        let lines = render(&["id", "description"], &[vec!["1".into(), long.clone()]]);
        assert_eq!(lines[1].len(), 2 + 2 + 70_000);
        let lines = render(
            &["id", "name"],
            &[vec!["12".into(), "x".into()], vec!["3".into(), "yy".into()]],
        );
        assert_eq!(lines, vec!["id  name", "12  x", "3   yy"]);
    }
}

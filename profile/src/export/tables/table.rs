//! Text-table helpers shared by every table of the text report.

use std::cmp::Ordering;

/// How many of `len` rows a table shows for `--top top` (0: all).
pub fn shown_rows(top: usize, len: usize) -> usize {
    if top == 0 {
        len
    } else {
        top.min(len)
    }
}

/// The line under a table that does not show all its rows; empty when it does.
pub fn more_rows(shown: usize, len: usize) -> String {
    more_of(shown, len, "rows")
}

/// The same line naming what was left out (`chains`, `processes`; `""`: nothing named).
pub fn more_of(shown: usize, len: usize, what: &str) -> String {
    if shown >= len {
        return String::new();
    }
    let space = if what.is_empty() { "" } else { " " };
    format!("({} more{space}{what}: --top 0 shows all)\n", len - shown)
}

/// Sorts `rows` most first by `amount` (a total, or a tuple of them), ties in the order
/// of `tie` (names, pids: the same order every time).
pub(crate) fn most_first<T, K: Ord>(
    rows: &mut [T],
    amount: impl Fn(&T) -> K,
    tie: impl Fn(&T, &T) -> Ordering,
) {
    rows.sort_by(|a, b| amount(b).cmp(&amount(a)).then_with(|| tie(a, b)));
}

/// The same for an `amount` that is a rate or a share (`f64`, in its total order).
pub(crate) fn most_first_f64<T>(
    rows: &mut [T],
    amount: impl Fn(&T) -> f64,
    tie: impl Fn(&T, &T) -> Ordering,
) {
    rows.sort_by(|a, b| amount(b).total_cmp(&amount(a)).then_with(|| tie(a, b)));
}

/// Cuts `text` to `width` characters, marking the cut with `…`.
pub fn fit(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        text.to_string()
    } else {
        let mut cut: String = text.chars().take(width.saturating_sub(1)).collect();
        cut.push('…');
        cut
    }
}

/// Test helper: every line of `text` fits the report's 100 columns.
#[cfg(test)]
pub(crate) fn assert_fits_100_columns(text: &str) {
    for line in text.lines() {
        assert!(line.chars().count() <= 100, "too wide: {line}");
    }
}

/// Test helper: `text` shows each of `parts`, and fits the report's 100 columns.
#[cfg(test)]
pub(crate) fn assert_table_shows(text: &str, parts: &[&str]) {
    for part in parts {
        assert!(text.contains(part), "no {part:?} in\n{text}");
    }
    assert_fits_100_columns(text);
}

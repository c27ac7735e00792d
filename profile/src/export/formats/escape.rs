//! Escaping of names that anyone on the profiled machine chooses (process, thread and
//! symbol names, file paths) for every format we render into.

/// Text and attribute values in HTML and SVG (XML): `& < > " '` become entities.
pub fn html(text: &str) -> String {
    escape(text, |ch| match ch {
        '&' => Some("&amp;"),
        '<' => Some("&lt;"),
        '>' => Some("&gt;"),
        '"' => Some("&quot;"),
        '\'' => Some("&#39;"),
        _ => None,
    })
}

/// A Prometheus label value (text exposition format): `\`, `"` and line feeds escaped;
/// other control characters are replaced, since some scrapers reject them.
pub fn prometheus_label(text: &str) -> String {
    escape(text, |ch| match ch {
        '\\' => Some("\\\\"),
        '"' => Some("\\\""),
        '\n' => Some("\\n"),
        ch if ch.is_control() => Some("?"),
        _ => None,
    })
}

/// `text` with each character that `replacement` names replaced; the others kept.
fn escape(text: &str, replacement: impl Fn(char) -> Option<&'static str>) -> String {
    let mut out = String::with_capacity(text.len());
    for ch in text.chars() {
        match replacement(ch) {
            Some(replaced) => out.push_str(replaced),
            None => out.push(ch),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_escapes_markup() {
        assert_eq!(
            html(r#"<svg onload=x>"a'&"#),
            "&lt;svg onload=x&gt;&quot;a&#39;&amp;"
        );
    }

    #[test]
    fn prometheus_escapes_quotes_and_breaks() {
        assert_eq!(prometheus_label("a\"b\\c\nd\te"), "a\\\"b\\\\c\\nd?e");
    }
}

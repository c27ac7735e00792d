//! `report --format html`: one self-contained page (no network: a CSP forbids it) with
//! the tables of every kind present and its flamegraph inline. Each inferno SVG sits in
//! its own `srcdoc` iframe so its script (search, zoom) runs as in the standalone file,
//! without clashing with the other flamegraphs' ids and globals. Every name is escaped.

use anyhow::Result;

use crate::{
    export::{self, formats::escape::html as esc, formats::flamegraph, tables::latency},
    kind::Kind,
    profile::Profile,
    units::format_ns,
};

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}\
h1{font-size:1.4em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ccc}\
h3{font-size:1em}table{border-collapse:collapse;font-size:0.9em;margin-bottom:1em}\
th,td{padding:2px 8px;border-bottom:1px solid #eee;text-align:left}\
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}\
dl{display:grid;grid-template-columns:max-content auto;gap:2px 12px}dt{font-weight:bold}\
dd{margin:0;font-family:monospace}\
iframe.flamegraph{width:100%;border:1px solid #ccc}pre.histogram{font-size:0.85em}\
th{cursor:pointer;user-select:none}th[aria-sort=ascending]::after{content:\" \\25B2\"}\
th[aria-sort=descending]::after{content:\" \\25BC\"}\
table.collapsed tr.more{display:none}button.more{margin:0 0 1em 0}\
p.note{font-size:0.85em;color:#555}";

/// Rows a table shows before the rest are collapsed behind a button.
const SHOWN_ROWS: usize = 15;

/// Sortable tables (click a header; numbers with units compare as numbers) and long
/// tables collapsed after the first rows. Inline: the page loads nothing.
const SCRIPT: &str = r#"(function(){
const UNIT={ns:1e-9,us:1e-6,"\u00b5s":1e-6,ms:1e-3,s:1,min:60,h:3600,B:1,KiB:1024,MiB:1048576,GiB:1073741824,"%":1};
function key(text){const m=text.trim().match(/^([-+]?[0-9.]+(?:e[-+]?[0-9]+)?)\s*([a-zA-Z%\u00b5]*)/);
 if(!m)return null;const u=m[2]===""?1:UNIT[m[2]];return u===undefined?null:parseFloat(m[1])*u;}
function fold(table){const rows=table.tBodies[0].rows;
 for(let i=0;i<rows.length;i++)rows[i].classList.toggle("more",i>=SHOWN);}
const SHOWN=%SHOWN%;
for(const table of document.querySelectorAll("table")){
 const body=table.tBodies[0];if(!body)continue;
 table.querySelectorAll("th").forEach(function(th,col){th.addEventListener("click",function(){
  const down=th.getAttribute("aria-sort")!=="descending";
  table.querySelectorAll("th").forEach(function(h){h.removeAttribute("aria-sort");});
  th.setAttribute("aria-sort",down?"descending":"ascending");
  const rows=Array.from(body.rows);
  rows.sort(function(a,b){const x=a.cells[col].textContent,y=b.cells[col].textContent;
   const kx=key(x),ky=key(y);const c=(kx!==null&&ky!==null)?kx-ky:x.localeCompare(y);return down?-c:c;});
  rows.forEach(function(r){body.appendChild(r);});fold(table);});});
 if(body.rows.length>SHOWN){fold(table);table.classList.add("collapsed");
  const button=document.createElement("button");button.className="more";
  const more=body.rows.length-SHOWN;button.textContent="show "+more+" more rows";
  button.addEventListener("click",function(){const c=table.classList.toggle("collapsed");
   button.textContent=c?"show "+more+" more rows":"show the top "+SHOWN+" only";});
  table.after(button);}}
})();"#;

/// The end of a page: its script (sortable, collapsed tables).
pub(crate) fn page_end() -> String {
    format!(
        "<script>{}</script>\n</body></html>\n",
        SCRIPT.replace("%SHOWN%", &SHOWN_ROWS.to_string())
    )
}

/// A table; cells are escaped here. `numeric[i]` right-aligns column i.
pub(crate) fn table(headers: &[&str], numeric: &[bool], rows: &[Vec<String>]) -> String {
    let class = |index: usize| {
        if numeric.get(index).copied().unwrap_or(false) {
            " class=\"n\""
        } else {
            ""
        }
    };
    let mut out = String::from("<table>\n<thead><tr>");
    for (index, header) in headers.iter().enumerate() {
        out.push_str(&format!("<th{}>{}</th>", class(index), esc(header)));
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    for row in rows {
        out.push_str("<tr>");
        for (index, cell) in row.iter().enumerate() {
            out.push_str(&format!("<td{}>{}</td>", class(index), esc(cell)));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody>\n</table>\n");
    out
}

/// The inferno SVG inside an iframe document of its own.
pub(crate) fn flamegraph_frame(svg: &[u8], title: &str) -> String {
    let svg = String::from_utf8_lossy(svg);
    // Drop the XML prolog and doctype: the iframe document is HTML with inline SVG.
    let body = svg.find("<svg").map(|start| &svg[start..]).unwrap_or(&svg);
    let attribute = |name: &str| {
        body.split_once(&format!(" {name}=\""))
            .and_then(|(_, rest)| rest.split('"').next())
            .and_then(|value| value.parse::<u32>().ok())
    };
    let height = attribute("height").unwrap_or(600);
    // inferno keeps zoom and search in the page URL with history.replaceState, which an
    // about:srcdoc document may not do: the state stays in the page instead.
    let document = format!(
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\">\
         <style>html,body{{margin:0}}svg{{display:block;width:100%}}</style>\
         <script>history.replaceState=function(){{}};</script></head><body>{body}</body></html>"
    );
    format!(
        // inferno's SVG is fluid: its script sets the width to 100% (frames and text in
        // percent) and keeps the height; the style does the same before (or without)
        // the script, so the graph fills its frame whatever the window's width.
        "<iframe class=\"flamegraph\" title=\"{}\" style=\"height:{}px\" srcdoc=\"{}\"></iframe>\n",
        esc(title),
        height + 8,
        esc(&document)
    )
}

/// What each `lock_name_source` means, under a table that shows them.
const NAME_SOURCES: &str = "named by: task = from the waiting task's structures \
    (mm, files, sighand, fs, signal); task_struct = a task's own lock (its own or \
    another's); runqueue = a CPU's runqueue lock; percpu = a lock in a per-CPU variable; \
    slab = the slab cache of the lock's object; slab_merged = a guess (~): the one type \
    with a lock there among the caches merged with it; slab_unchecked = a guess (~): a \
    cache that may be merged; slab_kmalloc = a guess (~): a kmalloc object's struct, \
    from the functions that take its lock; kallsyms = a data symbol; caller = a static lock without \
    a symbol (static@) or a lock of an unknown slab object (slab@), by the function that \
    takes it; member = a member of a named lock (its wait_lock); class = interchangeable \
    instances in one row (hashed or on-stack wait queues, futex hash buckets, kmalloc \
    objects by caller); address = not named.";

/// A table of locks; with `named`, the "named by" column at `at` and its legend below.
pub(crate) fn table_named_by(
    mut headers: Vec<&str>,
    mut numeric: Vec<bool>,
    at: usize,
    named: bool,
    rows: &[Vec<String>],
) -> String {
    if named {
        headers.insert(at, "named by");
        numeric.insert(at, false);
    }
    let mut out = table(&headers, &numeric, rows);
    if named {
        out.push_str(&format!("<p class=\"note\">{}</p>\n", esc(NAME_SOURCES)));
    }
    out
}

/// A kind's section of the report, under the headings of its view: the section's
/// title, what `tables` writes, then the kind's flamegraph (under its heading, when it
/// has one) and the section's end.
pub(crate) fn kind_section(
    profile: &Profile,
    kind: Kind,
    tables: impl FnOnce(&mut String),
) -> Result<String> {
    let headings = &kind.view().info().report;
    let mut out = format!(
        "<section id=\"{}\">\n<h2>{}</h2>\n",
        kind.name(),
        headings.title
    );
    tables(&mut out);
    if let Some(heading) = headings.flame_heading {
        out.push_str(&format!("<h3>{heading}</h3>\n"));
    }
    let svg = flamegraph::render_svg(profile, kind)?;
    out.push_str(&flamegraph_frame(&svg, headings.flame_title));
    out.push_str("</section>\n");
    Ok(out)
}

/// The table of request or function latency `groups` (each a `what`: request,
/// function).
pub(crate) fn latency_table(out: &mut String, what: &str, groups: &[latency::LatencyGroup]) {
    let rows: Vec<Vec<String>> = groups
        .iter()
        .take(50)
        .map(|group| {
            vec![
                group.latency.count.to_string(),
                crate::units::format_ns(group.latency.total_ns),
                crate::units::format_ns(group.latency.mean_ns),
                crate::units::format_ns(group.latency.max_ns),
                group.name.clone(),
                group.process.clone(),
                group.completed_in.clone().unwrap_or_default(),
            ]
        })
        .collect();
    if rows.is_empty() {
        out.push_str(&format!("<p>No {what} recorded.</p>\n"));
    } else {
        out.push_str(&table(
            &[
                "count",
                "total",
                "mean",
                "max",
                what,
                "process",
                "completed in",
            ],
            &[true, true, true, true, false, false, false],
            &rows,
        ));
    }
}

fn overview(profile: &Profile) -> String {
    let mut out = String::from("<dl>\n");
    let mut item = |name: &str, value: String| {
        out.push_str(&format!("<dt>{}</dt><dd>{}</dd>\n", esc(name), esc(&value)));
    };
    item("host", profile.host.clone());
    item("kernel", profile.kernel.clone());
    item(
        "start",
        format!("{} (UTC)", crate::units::iso8601_utc(profile.start_unix_s)),
    );
    item("duration", format!("{:.1} s", profile.duration_s));
    let mut target = profile.targets.mode.clone();
    if !profile.targets.pids.is_empty() {
        target.push_str(&format!(" {:?}", profile.targets.pids));
    }
    if !profile.targets.command.is_empty() {
        target.push_str(&format!(": {}", profile.targets.command.join(" ")));
    }
    if let Some(cgroup) = &profile.targets.cgroup {
        target.push_str(&format!(": {cgroup}"));
    }
    item("target", target);
    for probe in &profile.probes {
        item(&format!("probe {}", probe.family), probe.method.clone());
    }
    item("command line", profile.command_line.join(" "));
    item("processes", profile.processes.len().to_string());
    out.push_str("</dl>\n");
    out
}

fn losses(profile: &Profile) -> String {
    let mut out = String::from("<section id=\"losses\">\n<h2>Lost events</h2>\n");
    let row = |(name, count): (&String, &u64)| {
        let why = profiler_common::loss::loss_meaning(name).to_string();
        vec![count.to_string(), name.clone(), why]
    };
    let (lost, kept) = crate::profile::lost_and_kept(&profile.losses);
    if lost.is_empty() {
        out.push_str("<p>None: every event was recorded.</p>\n");
    } else {
        out.push_str(
            "<p>The numbers above miss the events dropped; those a full map counted in a row \
             without its detail are in them.</p>\n",
        );
        let rows: Vec<Vec<String>> = lost.into_iter().map(row).collect();
        out.push_str(&table(&["count", "cause", "meaning"], &[true], &rows));
    }
    if !kept.is_empty() {
        out.push_str(
            "<p>Nothing lost (a slower path the programs took; these events are in the \
             numbers above):</p>\n",
        );
        let rows: Vec<Vec<String>> = kept.into_iter().map(row).collect();
        out.push_str(&table(&["count", "cause", "meaning"], &[true], &rows));
    }
    out.push_str("</section>\n");
    out
}

pub fn render(profile: &Profile) -> Result<String> {
    let title = format!(
        "lockpath report — {} — {:.1} s",
        profile.host, profile.duration_s
    );
    let mut out = page_head(&title);
    out.push_str(&overview(profile));
    out.push_str(&crate::waiting::html_section(profile));
    let kinds = export::kinds_present(profile);
    if kinds.is_empty() {
        out.push_str("<p>This profile has no recorded events.</p>\n");
    }
    for kind in kinds {
        out.push_str(&kind.view().html_section(profile)?);
    }
    out.push_str(&export::tables::chains::html_section(profile));
    out.push_str(&crate::timeline::html_section(profile));
    out.push_str(&losses(profile));
    out.push_str(&page_end());
    Ok(out)
}

/// The page head: CSP (nothing loads), title, style.
pub(crate) fn page_head(title: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; \
         script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:\">\n\
         <title>{}</title>\n<style>{STYLE}</style></head>\n<body>\n<h1>{}</h1>\n",
        esc(title),
        esc(title)
    )
}

/// `diff --format html`: two profiles side by side, per second of run: every table of
/// the kind (largest growth first, sortable), and the differential flamegraph (red grew,
/// blue shrank).
pub fn render_diff(base: &Profile, new: &Profile, kind: Kind) -> Result<String> {
    let title = format!(
        "lockpath diff — {} ({:.1} s) vs {} ({:.1} s) — {}",
        base.host,
        base.duration_s,
        new.host,
        new.duration_s,
        kind.name()
    );
    let mut out = page_head(&title);
    out.push_str("<dl>\n");
    for (name, profile) in [("base", base), ("new", new)] {
        out.push_str(&format!(
            "<dt>{name}</dt><dd>{} — {} (UTC) — {:.1} s</dd>\n",
            esc(&profile.host),
            crate::units::iso8601_utc(profile.start_unix_s),
            profile.duration_s
        ));
    }
    out.push_str("</dl>\n");
    let per_second = |value: f64| match kind.view().weighs_time() {
        false => format!("{value:.1}"),
        true => format!("{}/s", format_ns(value.abs() as u64)),
    };
    for table_data in export::operations::diff::diff(base, new, kind) {
        out.push_str(&format!(
            "<h2>By {} ({}, per second of run)</h2>\n",
            esc(&table_data.by),
            esc(&table_data.unit)
        ));
        // Lock by lock: how each run named the lock, when the profiles say.
        let named = table_data
            .rows
            .iter()
            .any(|row| !row.base_name_source.is_empty() || !row.new_name_source.is_empty());
        let rows: Vec<Vec<String>> = table_data
            .rows
            .iter()
            .map(|row| {
                let sign = if row.change_per_s < 0.0 { "-" } else { "+" };
                let mut cells = vec![
                    row.key.clone(),
                    per_second(row.base_per_s),
                    per_second(row.new_per_s),
                    format!("{sign}{}", per_second(row.change_per_s)),
                    row.ratio
                        .map_or("new".to_string(), |ratio| format!("{ratio:.2}x")),
                ];
                if named {
                    let (base, new) = (&row.base_name_source, &row.new_name_source);
                    let named_by = match (base.is_empty(), new.is_empty()) {
                        (true, _) => new.clone(),
                        (false, true) => base.clone(),
                        _ if base == new => new.clone(),
                        _ => format!("{base}→{new}"),
                    };
                    cells.insert(1, named_by);
                }
                cells
            })
            .collect();
        out.push_str(&table_named_by(
            vec![table_data.by.as_str(), "base", "new", "change", "new/base"],
            vec![false, true, true, true, true],
            1,
            named,
            &rows,
        ));
    }
    if export::has_kind(new, kind) {
        let svg = flamegraph::render_diff_svg(base, new, kind)?;
        out.push_str("<h2>Differential flamegraph (red grew, blue shrank)</h2>\n");
        out.push_str(&flamegraph_frame(&svg, "differential flamegraph"));
    } else if export::has_kind(base, kind) {
        out.push_str(&format!(
            "<p>No differential flamegraph: it is drawn from the new profile's stacks, and \
             the new profile has no {} events.</p>\n",
            kind.name()
        ));
    }
    out.push_str(&page_end());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::formats::report::tests::profile_with_two_locks;

    fn hostile_profile() -> Profile {
        let mut profile = profile_with_two_locks();
        profile.processes[0].comm = "<svg onload=x>".into();
        profile.frames[2].name = "ns::f<\"q'\">&<script>alert(1)</script>".into();
        profile.host = "<b>host</b>".into();
        profile
    }

    #[test]
    fn page_is_self_contained_with_tables_and_flamegraph() {
        let page = render(&profile_with_two_locks()).expect("html");
        assert!(page.starts_with("<!DOCTYPE html>"));
        assert!(page.contains("default-src 'none'"), "no network");
        assert!(
            !page.contains("http://") || !page.contains("src=\"http"),
            "no remote resources"
        );
        assert!(page.contains("<iframe class=\"flamegraph\""));
        assert!(page.contains("<td>do_pipe2</td>") || page.contains("do_pipe2"));
        assert!(page.contains("<td class=\"n\">7.00 ms</td>"), "{page}");
    }

    #[test]
    fn lock_table_says_how_each_lock_was_named() {
        // Profiles of older versions do not say: no column, no legend.
        let page = render(&profile_with_two_locks()).expect("html");
        assert!(!page.contains("<th>named by</th>"), "{page}");
        let profile = crate::export::formats::report::tests::profile_with_named_locks();
        let page = render(&profile).expect("html");
        // By lock only (callers and processes group several locks).
        assert_eq!(page.matches("<th>named by</th>").count(), 1, "{page}");
        assert!(page.contains("<td>mmap_lock</td><td>task</td>"), "{page}");
        assert!(page.contains("<td>0xffff1</td><td>address</td>"), "{page}");
        assert!(
            page.contains("<p class=\"note\">named by: task = "),
            "{page}"
        );
        // The diff page: each run's method, a change shown as BASE→NEW.
        let new = crate::export::formats::report::tests::spinlock_renamed(&profile);
        let page = render_diff(&profile, &new, Kind::Lock).expect("page");
        assert_eq!(page.matches("<th>named by</th>").count(), 1, "{page}");
        assert!(
            page.contains("<td>spinlock 0xffff1</td><td>address→kallsyms</td>"),
            "{page}"
        );
        assert!(
            page.contains("<td>rwsem:W mmap_lock</td><td>task</td>"),
            "{page}"
        );
    }

    #[test]
    fn offcpu_and_io_sections_with_breakdown_histograms_and_flamegraphs() {
        let page = render(&crate::export::tables::offcpu::tests::profile_with_waits_and_io())
            .expect("html");
        assert!(page.contains("<section id=\"offcpu\">"), "{page}");
        assert!(page.contains("<section id=\"io\">"), "{page}");
        // mdtest: 100 ms off CPU, 60% buffer with its top stack.
        assert!(page.contains("<td>mdtest</td>"), "{page}");
        assert!(page.contains("<td class=\"n\">60.0</td>"), "{page}");
        assert!(
            page.contains("__wait_on_buffer &lt; ext4_read_bh"),
            "{page}"
        );
        // The loop0 histogram, biolatency style.
        assert!(page.contains("loop0 (7:0)"), "{page}");
        assert!(page.contains("64 -&gt; 127"), "{page}");
        assert!(page.contains("title=\"off-CPU flamegraph\""), "{page}");
        assert!(page.contains("title=\"IO wait flamegraph\""), "{page}");
    }

    #[test]
    fn every_section_ends_once() {
        let mut profile = crate::export::tables::offcpu::tests::profile_with_waits_and_io();
        profile.file_calls.push(crate::profile::FileCallRow {
            pid: profile.processes[0].pid,
            call: "read".into(),
            count: 3,
            bytes: 12288,
            total_ns: 3000,
            max_ns: 1500,
            ..Default::default()
        });
        let page = render(&profile).expect("html");
        assert!(page.contains("<section id=\"file\">"), "{page}");
        assert_eq!(
            page.matches("<section").count(),
            page.matches("</section>").count(),
            "{page}"
        );
    }

    #[test]
    fn diff_page_has_tables_dates_and_the_differential_flamegraph() {
        let base = crate::export::formats::report::tests::profile_with_two_locks();
        let mut new = crate::export::formats::report::tests::profile_with_two_locks();
        new.locks[0].total_ns *= 10;
        let page = render_diff(&base, &new, Kind::Lock).expect("page");
        assert!(page.contains("<h2>By lock"), "{page}");
        assert!(page.contains("<iframe class=\"flamegraph\""));
        assert!(page.contains("T") && page.contains("(UTC)"));
        assert!(page.contains("aria-sort") || page.contains("<script>"));
    }

    #[test]
    fn start_is_iso_8601_and_the_svg_takes_the_frame_width() {
        let mut profile = hostile_profile();
        profile.start_unix_s = 1_796_272_703;
        let page = render(&profile).expect("page");
        assert!(page.contains("2026-12-03T04:38:23Z (UTC)"), "no ISO start");
        assert!(!page.contains("1796272703"), "raw Unix time in the page");
        assert!(
            page.contains("svg{display:block;width:100%}"),
            "the SVG does not take the frame's width"
        );
    }

    #[test]
    fn hostile_names_are_escaped() {
        let page = render(&hostile_profile()).expect("html");
        assert!(!page.contains("<svg onload=x>"), "raw process name in page");
        assert!(!page.contains("<script>alert"), "raw symbol in page");
        assert!(!page.contains("<b>host"), "raw host name in page");
        assert!(page.contains("&lt;svg onload=x&gt;"));
        // Inside the srcdoc attribute the SVG's own escaping is escaped once more.
        assert!(
            page.contains("&amp;lt;svg onload=x&amp;gt;"),
            "escaped in the flamegraph"
        );
        // No attribute value is broken out of: every quote inside srcdoc is an entity.
        let srcdoc = page.split("srcdoc=\"").nth(1).expect("srcdoc");
        let value = srcdoc.split('"').next().expect("value");
        assert!(
            value.ends_with("</html>") || value.contains("&lt;/html&gt;"),
            "srcdoc ends where it should"
        );
    }
}

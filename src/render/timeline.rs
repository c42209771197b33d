//! `mcsup timeline`: one self-contained HTML page (inline SVG, no script, no external asset)
//! drawing every process of every node on a shared time axis, from the nodes' event logs. Pure.

use std::fmt::Write as _;

use crate::runfiles::{EventKind, EventRecord};

/// One drawn stretch of a process's life.
struct Span {
    from: u64,
    to: u64,
    /// `starting` (spawned, not ready), `ready`, `stopping`, `failed` (down after an exit nobody
    /// asked for, until it is spawned again or the end).
    phase: &'static str,
    title: String,
}

fn html_escape(v: &str) -> String {
    v.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The spans and point marks (restarts, failures) of one process from its events, in order.
fn spans_of(events: &[&EventRecord], end: u64) -> (Vec<Span>, Vec<(u64, String, String)>) {
    let mut spans = Vec::new();
    let mut marks = Vec::new();
    // The open stretch: (since, phase, title).
    let mut open: Option<(u64, &'static str, String)> = None;
    let close = |open: &mut Option<(u64, &'static str, String)>, at: u64, spans: &mut Vec<Span>| {
        if let Some((from, phase, title)) = open.take() {
            spans.push(Span {
                from,
                to: at.max(from),
                phase,
                title,
            });
        }
    };
    for e in events {
        let detail = e.detail.clone().unwrap_or_default();
        let t = e.ts_ms;
        match e.event {
            EventKind::Spawned => {
                close(&mut open, t, &mut spans);
                open = Some((
                    t,
                    "starting",
                    format!("{} spawned (pid {})", e.process, e.pid.unwrap_or(0)),
                ));
            }
            EventKind::Waiting | EventKind::StillWaiting => {
                if open.is_none() {
                    open = Some((t, "starting", format!("{} waiting", e.process)));
                }
                if e.event == EventKind::StillWaiting {
                    marks.push((t, "wait".to_string(), format!("still waiting: {detail}")));
                }
            }
            EventKind::Ready => {
                close(&mut open, t, &mut spans);
                open = Some((t, "ready", format!("{} ready", e.process)));
            }
            EventKind::Stopping | EventKind::Killing => {
                if open.as_ref().is_some_and(|o| o.1 == "stopping") {
                    continue;
                }
                close(&mut open, t, &mut spans);
                open = Some((
                    t,
                    "stopping",
                    format!("{} {}: {detail}", e.process, e.event),
                ));
            }
            EventKind::Failed => {
                if open.as_ref().is_some_and(|o| o.1 != "failed") {
                    close(&mut open, t, &mut spans);
                }
                marks.push((
                    t,
                    "failed".to_string(),
                    format!("{} failed: {detail}", e.process),
                ));
            }
            EventKind::Servable => {
                marks.push((t, "servable".to_string(), format!("servable: {detail}")))
            }
            EventKind::WorkersLost => {
                marks.push((t, "lost".to_string(), format!("workers lost: {detail}")))
            }
            EventKind::WorkersBack => {
                marks.push((t, "back".to_string(), format!("workers back: {detail}")))
            }
            EventKind::Restarting => marks.push((
                t,
                "restart".to_string(),
                format!("{} restarting: {detail}", e.process),
            )),
            EventKind::Exited | EventKind::Stopped | EventKind::Completed => {
                let code = e
                    .exit_code
                    .map(|c| format!(", exit code {c}"))
                    .unwrap_or_default();
                let mut failed =
                    e.event == EventKind::Exited && e.exit_code.is_some_and(|c| c != 0);
                if let Some((from, phase, title)) = open.take() {
                    failed &= phase != "stopping";
                    spans.push(Span {
                        from,
                        to: t.max(from),
                        phase,
                        title: format!("{title}; {} at +{} ms{code}", e.event, t - from),
                    });
                }
                // What it did until then stays drawn as it was (it was ready); the time it is down
                // is the red bar, to its restart or the end.
                if failed {
                    let signal = e
                        .signal
                        .as_ref()
                        .map(|s| format!(" ({s})"))
                        .unwrap_or_default();
                    open = Some((
                        t,
                        "failed",
                        format!("{} down: exited{code}{signal}", e.process),
                    ));
                }
            }
            _ => {}
        }
    }
    close(&mut open, end, &mut spans);
    (spans, marks)
}

/// The distance between two ticks of the time axis for a span of `span_ms`: a round step (1, 2
/// or 5 x 10^k ms up to 50 s, then whole minutes) that gives at most 11 ticks.
fn tick_step(span_ms: u64) -> u64 {
    const MINUTE: u64 = 60_000;
    let candidates = [1, 2, 5]
        .into_iter()
        .flat_map(|m| (0..7).map(move |k| m * 10u64.pow(k)))
        .filter(|s| *s < MINUTE)
        .chain([1, 2, 5, 10, 15, 30, 60, 120, 240, 480].map(|m| m * MINUTE));
    let mut steps: Vec<u64> = candidates.collect();
    steps.sort_unstable();
    steps
        .into_iter()
        .find(|s| span_ms.div_ceil(*s) <= 10)
        .unwrap_or(960 * MINUTE)
}

/// A tick's label: milliseconds for steps under a second, seconds under a minute, then minutes.
fn tick_label(at_ms: u64, step: u64) -> String {
    if step < 1_000 {
        if at_ms >= 1_000 {
            format!("{:.1} s", at_ms as f64 / 1000.0)
        } else {
            format!("{at_ms} ms")
        }
    } else if step < 60_000 {
        format!("{} s", at_ms / 1000)
    } else {
        format!("{} min", at_ms / 60_000)
    }
}

const LEFT: f64 = 260.0;
const WIDTH: f64 = 1100.0;
const ROW: f64 = 20.0;
const TOP: f64 = 40.0;

/// The time axis: a wall-clock time's x.
struct Scale {
    start: u64,
    end: u64,
}

impl Scale {
    fn x(&self, t: u64) -> f64 {
        LEFT + (t.saturating_sub(self.start)) as f64 / (self.end - self.start) as f64 * WIDTH
    }
}

/// The rows: each node's processes in order of first appearance (mcsup's own events are
/// markers), the first failure's process moved to the top.
fn row_order<'a>(
    nodes: &'a [(String, Vec<EventRecord>)],
    first: Option<&super::why::Failure>,
) -> Vec<(usize, &'a str)> {
    let mut order: Vec<(usize, &str)> = Vec::new();
    for (k, (_, evs)) in nodes.iter().enumerate() {
        let mut seen = std::collections::HashSet::new();
        for e in evs.iter().filter(|e| e.process != "mcsup") {
            if seen.insert(e.process.as_str()) {
                order.push((k, &e.process));
            }
        }
    }
    if let Some(f) = first {
        if let Some(i) = order
            .iter()
            .position(|(k, p)| nodes[*k].0 == f.node && *p == f.process)
        {
            let r = order.remove(i);
            order.insert(0, r);
        }
    }
    order
}

/// One process's row: its spans and marks.
fn draw_process(
    rows: &mut String,
    scale: &Scale,
    row: usize,
    node: &str,
    name: &str,
    evs: &[EventRecord],
    is_first: bool,
) {
    let (start, end) = (scale.start, scale.end);
    let x = |t: u64| scale.x(t);
    // What is still open when the node's mcsup finished (a gate) ends there.
    let node_end = evs
        .iter()
        .rfind(|e| e.process == "mcsup" && e.event == EventKind::Finished)
        .map_or(end, |e| e.ts_ms);
    let mine: Vec<&EventRecord> = evs.iter().filter(|e| e.process == *name).collect();
    let (spans, marks) = spans_of(&mine, node_end);
    let y = TOP + row as f64 * ROW;
    let _ = write!(
        rows,
        r#"<g class="process{c}" data-node="{n}" data-process="{p}"{a}><text class="label" x="{lx:.1}" y="{ty:.1}">{pre}{n} / {p}</text>"#,
        c = if is_first { " first-failure" } else { "" },
        a = if is_first {
            r#" data-first-failure="true""#
        } else {
            ""
        },
        pre = if is_first { "first failure: " } else { "" },
        n = html_escape(node),
        p = html_escape(name),
        lx = LEFT - 8.0,
        ty = y + ROW * 0.7
    );
    for s in spans {
        let _ = write!(
            rows,
            r#"<rect class="bar {ph}" data-phase="{ph}" data-from="{f}" data-to="{t}" x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}"><title>{title}</title></rect>"#,
            ph = s.phase,
            f = s.from - start,
            t = s.to - start,
            x = x(s.from),
            y = y + 3.0,
            w = (x(s.to) - x(s.from)).max(2.0),
            h = ROW - 6.0,
            title = html_escape(&s.title)
        );
    }
    for (t, kind, title) in marks {
        let _ = write!(
            rows,
            r#"<circle class="mark {k}" data-mark="{k}" cx="{cx:.1}" cy="{cy:.1}" r="4"><title>{title}</title></circle>"#,
            k = kind,
            cx = x(t),
            cy = y + ROW / 2.0,
            title = html_escape(&title)
        );
    }
    rows.push_str("</g>");
}

/// `mcsup timeline`: every process of every node on one time axis (spawned -> ready ->
/// stopping -> gone, restarts and failures marked, failures in red with the reason on hover),
/// the shutdown requests as vertical lines. One self-contained HTML file: inline SVG and CSS, no
/// script, no external asset. Pure: the caller reads the events files.
pub fn timeline_html(nodes: &[(String, Vec<EventRecord>)]) -> String {
    let all = nodes.iter().flat_map(|(_, evs)| evs.iter());
    let start = all.clone().map(|e| e.ts_ms).min().unwrap_or(0);
    let end = all.map(|e| e.ts_ms).max().unwrap_or(start).max(start + 1);
    let scale = Scale { start, end };
    let x = |t: u64| scale.x(t);
    let story = super::why::story(nodes);
    let first = story.first.as_ref();
    let drained: Vec<&str> = story.drained().map(|n| n.node).collect();
    let order = row_order(nodes, first);
    let mut rows = String::new();
    let mut lines = String::new();
    let mut bands = String::new();
    // Where each node's rows start and how many it has (the first failure's row apart).
    let mut node_rows: Vec<(usize, usize)> = vec![(usize::MAX, 0); nodes.len()];
    for (row, (k, _)) in order.iter().enumerate() {
        let is_first = row == 0 && first.is_some();
        if !is_first {
            let r = &mut node_rows[*k];
            r.0 = r.0.min(row);
            r.1 += 1;
        }
    }
    if first.is_some() && !order.is_empty() {
        let _ = write!(
            bands,
            r#"<rect class="band first" x="0" y="{y:.1}" width="{w:.1}" height="{h:.1}"/>"#,
            y = TOP,
            w = LEFT + WIDTH + 20.0,
            h = ROW
        );
    }
    for (k, (node, evs)) in nodes.iter().enumerate() {
        let (top, count) = node_rows[k];
        let top = if count == 0 { 0 } else { top };
        if k % 2 == 1 && count > 0 {
            // Every other node on a light band, so a node's rows read as one block.
            let _ = write!(
                bands,
                r#"<rect class="band" x="0" y="{y:.1}" width="{w:.1}" height="{h:.1}"/>"#,
                y = TOP + top as f64 * ROW,
                w = LEFT + WIDTH + 20.0,
                h = count as f64 * ROW
            );
        }
        let is_drained = drained.contains(&node.as_str());
        for e in evs
            .iter()
            .filter(|e| e.process == "mcsup" && e.event == EventKind::ShutdownRequested)
        {
            let because = match first {
                Some(f) if is_drained && e.ts_ms >= f.ts_ms => {
                    format!(
                        " (drained because of the first failure, {}/{})",
                        f.node, f.process
                    )
                }
                _ => String::new(),
            };
            let _ = write!(
                lines,
                r#"<line class="shutdown{c}" data-node="{n}" x1="{x:.1}" x2="{x:.1}" y1="{y0:.1}" y2="{y1:.1}"><title>{n}: shutdown requested: {d}{b}</title></line>"#,
                c = if because.is_empty() { "" } else { " drained" },
                n = html_escape(node),
                x = x(e.ts_ms),
                y0 = TOP + top as f64 * ROW,
                y1 = TOP + (top + count.max(1)) as f64 * ROW,
                d = html_escape(e.detail.as_deref().unwrap_or("")),
                b = html_escape(&because),
            );
        }
    }
    for (row, (k, name)) in order.iter().enumerate() {
        let (node, evs) = &nodes[*k];
        let is_first = row == 0 && first.is_some();
        draw_process(&mut rows, &scale, row, node, name, evs, is_first);
    }
    let row = order.len();
    // The job's servable moment, across every node's rows.
    for (node, evs) in nodes {
        for e in evs.iter().filter(|e| e.event == EventKind::Servable) {
            let _ = write!(
                lines,
                r#"<line class="servable" data-node="{n}" x1="{x:.1}" x2="{x:.1}" y1="{y0:.1}" y2="{y1:.1}"><title>{n}: servable: {d}</title></line>"#,
                n = html_escape(node),
                x = x(e.ts_ms),
                y0 = TOP,
                y1 = TOP + row.max(1) as f64 * ROW,
                d = html_escape(e.detail.as_deref().unwrap_or(""))
            );
        }
    }
    let height = TOP + row as f64 * ROW + 30.0;
    let total_s = (end - start) as f64 / 1000.0;
    let mut ticks = String::new();
    let step = tick_step(end - start);
    for k in 0..=(end - start) / step {
        let t = start + k * step;
        let _ = write!(
            ticks,
            r#"<line class="tick" x1="{x:.1}" x2="{x:.1}" y1="{y0}" y2="{y1:.1}"/><text class="tick" x="{x:.1}" y="{ty}">{s}</text>"#,
            x = x(t),
            y0 = TOP - 6.0,
            y1 = height - 24.0,
            ty = TOP - 10.0,
            s = tick_label(k * step, step)
        );
    }
    format!(
        r#"<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>mcsup timeline</title>
<style>
body {{ font: 12px sans-serif; margin: 12px; }}
.label {{ text-anchor: end; }}
line.tick {{ stroke: #ddd; }} text.tick {{ fill: #555; text-anchor: middle; }}
.bar.starting {{ fill: #f0b429; }} .bar.ready {{ fill: #3f9142; }}
.bar.stopping {{ fill: #8a8a8a; }} .bar.failed {{ fill: #d64545; }}
.mark.failed {{ fill: #d64545; }} .mark.restart {{ fill: #1f6feb; }} .mark.wait {{ fill: #f0b429; stroke: #7a5a00; }}
.mark.servable {{ fill: #3f9142; stroke: #000; }} .mark.lost {{ fill: #e8743b; stroke: #000; }} .mark.back {{ fill: #3f9142; }}
.shutdown {{ stroke: #d64545; stroke-dasharray: 4 3; }}
.servable {{ stroke: #3f9142; stroke-width: 2; }}
.band {{ fill: #f3f4f6; }} .band.first {{ fill: #fde8e8; }}
.shutdown.drained {{ stroke: #8a8a8a; }}
p.first-failure {{ color: #a61b1b; font-weight: bold; }}
</style></head>
<body>
<h1>mcsup timeline: {n} node(s), {p} process(es), {total_s:.1} s</h1>
{banner}
<p>amber: spawned, waiting to be ready; green: ready; grey: stopping; red: failed (hover for the reason); dots: restarts (blue), failures (red), long readiness waits (amber); dashed red line: shutdown requested (grey: a node drained because of the first failure, which is the top row); green line (and black-ringed green dot): the job became servable; black-ringed orange dot: the frontend lost workers, green dot: it has them all again.</p>
<svg xmlns="http://www.w3.org/2000/svg" width="{w:.0}" height="{height:.0}">
{bands}{ticks}{rows}{lines}
</svg>
</body></html>
"#,
        n = nodes.len(),
        p = row,
        banner = story.headline().map_or_else(String::new, |h| format!(
            r#"<p class="first-failure" id="first-failure">{}{}</p>"#,
            html_escape(&h),
            if drained.is_empty() {
                String::new()
            } else {
                html_escape(&format!("; drained because of it: {}", drained.join(", ")))
            }
        )),
        w = LEFT + WIDTH + 40.0,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_few() {
        for (span, step) in [
            (1, 1),
            (800, 100),
            (17_100, 2_000),
            (60_000, 10_000),
            (14 * 60_000, 2 * 60_000),
            (3_600_000, 10 * 60_000),
            (u64::MAX / 2, 960 * 60_000),
        ] {
            assert_eq!(tick_step(span), step, "span {span} ms");
        }
        assert_eq!(tick_label(300, 100), "300 ms");
        assert_eq!(tick_label(1_500, 500), "1.5 s");
        assert_eq!(tick_label(12_000, 2_000), "12 s");
        assert_eq!(tick_label(360_000, 120_000), "6 min");
        assert_eq!(tick_label(120_000, 60_000), "2 min");
    }
}

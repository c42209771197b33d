//! `mcsup timeline`: one self-contained HTML page (inline SVG, no script, no external asset)
//! drawing every process of every node on a shared time axis, from the nodes' event logs. Pure.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;

use super::groups::{Group, Groups};

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
            // The endpoint's canary: failing (orange, as a lost worker), generating again (green).
            EventKind::CanaryFailed => {
                marks.push((t, "lost".to_string(), format!("canary failed: {detail}")))
            }
            EventKind::CanaryOk => {
                marks.push((t, "back".to_string(), format!("canary ok: {detail}")))
            }
            // What the job is for: its judged result (green), or why it does not stand (red).
            EventKind::BenchmarkResult => {
                marks.push((t, "back".to_string(), format!("result: {detail}")))
            }
            EventKind::BenchmarkInvalid => marks.push((
                t,
                "failed".to_string(),
                format!("benchmark-invalid: {detail}"),
            )),
            EventKind::Restarting => marks.push((
                t,
                "restart".to_string(),
                format!("{} restarting: {detail}", e.process),
            )),
            // The coordinator's decisions for a worker over several nodes (its own row on the
            // infra node, named after the worker).
            EventKind::UnitRestart => {
                marks.push((t, "restart".to_string(), format!("{}: {detail}", e.process)))
            }
            EventKind::UnitFailed => marks.push((
                t,
                "failed".to_string(),
                format!("{} given up: {detail}", e.process),
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
/// or 5 x 10^k ms up to 50 s, then whole minutes: 1, 2, 5, 10, 15, 30, then 1, 2, 5 x 10^k hours)
/// that gives at most 11 ticks, whatever the span (an events file is input: a timestamp from
/// another epoch must not make a tick per minute of it).
fn tick_step(span_ms: u64) -> u64 {
    const MINUTE: u64 = 60_000;
    const HOUR: u64 = 60 * MINUTE;
    let short = (0..5)
        .flat_map(|k| [1, 2, 5].map(|m| m * 10u64.pow(k)))
        .chain([1, 2, 5, 10, 15, 30].map(|m| m * MINUTE));
    let hours = (0..16u32).flat_map(|k| {
        [1u64, 2, 5]
            .into_iter()
            .filter_map(move |m| m.checked_mul(10u64.checked_pow(k)?)?.checked_mul(HOUR))
    });
    short
        .chain(hours)
        .find(|s| span_ms.div_ceil(*s) <= 10)
        .unwrap_or(u64::MAX)
}

/// A tick's label: milliseconds for steps under a second, seconds under a minute, minutes under
/// an hour, then hours.
fn tick_label(at_ms: u64, step: u64) -> String {
    if step < 1_000 {
        if at_ms >= 1_000 {
            format!("{:.1} s", at_ms as f64 / 1000.0)
        } else {
            format!("{at_ms} ms")
        }
    } else if step < 60_000 {
        format!("{} s", at_ms / 1000)
    } else if step < 3_600_000 {
        format!("{} min", at_ms / 60_000)
    } else {
        format!("{} h", at_ms / 3_600_000)
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

/// One process of one node: its drawn spans and marks.
struct Row<'a> {
    node: usize,
    name: &'a str,
    spans: Vec<Span>,
    marks: Vec<(u64, String, String)>,
}

impl Row<'_> {
    /// It failed or was restarted: its group and node start open.
    fn troubled(&self) -> bool {
        self.spans.iter().any(|s| s.phase == "failed")
            || self
                .marks
                .iter()
                .any(|(_, k, _)| k == "failed" || k == "restart")
    }
}

/// Every process of every node (mcsup's own events are markers), in order of first appearance
/// on its node, each from its own events: one pass over each node's events.
fn rows_of(nodes: &[(String, Vec<EventRecord>)], end: u64) -> Vec<Row<'_>> {
    let mut rows = Vec::new();
    for (k, (_, evs)) in nodes.iter().enumerate() {
        // What is still open when the node's mcsup finished (a gate) ends there; on a node still
        // running, at the end of the picture.
        let node_end = evs
            .iter()
            .rfind(|e| e.process == "mcsup" && e.event == EventKind::Finished)
            .map_or(end, |e| e.ts_ms);
        let mut order: Vec<&str> = Vec::new();
        let mut mine: HashMap<&str, Vec<&EventRecord>> = HashMap::new();
        for e in evs.iter().filter(|e| e.process != "mcsup") {
            mine.entry(&e.process)
                .or_insert_with(|| {
                    order.push(&e.process);
                    Vec::new()
                })
                .push(e);
        }
        for name in order {
            let (spans, marks) = spans_of(&mine[name], node_end);
            rows.push(Row {
                node: k,
                name,
                spans,
                marks,
            });
        }
    }
    rows
}

/// A group's (or a node's) processes as one bar: failed while any of them is down after a
/// failure, stopping while any stops, ready while all are, starting while some are on their way
/// (ready or starting). One sweep over the spans' ends: O(s log s).
fn aggregate(rows: &[&Row], label: &str, start: u64) -> Vec<Span> {
    const PHASES: [&str; 4] = ["failed", "stopping", "ready", "starting"];
    let mut ends: Vec<(u64, usize, i64)> = Vec::new();
    for r in rows {
        for s in &r.spans {
            if let Some(p) = PHASES.iter().position(|p| *p == s.phase) {
                ends.push((s.from, p, 1));
                ends.push((s.to, p, -1));
            }
        }
    }
    ends.sort_unstable_by_key(|(t, _, _)| *t);
    let n = rows.len() as i64;
    let mut count = [0i64; 4];
    let mut out: Vec<Span> = Vec::new();
    let mut i = 0;
    while i < ends.len() {
        let t = ends[i].0;
        while i < ends.len() && ends[i].0 == t {
            count[ends[i].1] += ends[i].2;
            i += 1;
        }
        let Some(&(next, _, _)) = ends.get(i) else {
            break;
        };
        let phase = if count[0] > 0 {
            "failed"
        } else if count[1] > 0 {
            "stopping"
        } else if count[2] == n {
            "ready"
        } else if count[2] + count[3] > 0 {
            "starting"
        } else {
            continue;
        };
        match out.last_mut() {
            Some(last) if last.phase == phase && last.to == t => last.to = next,
            _ => out.push(Span {
                from: t,
                to: next,
                phase,
                title: format!(
                    "{label}: {phase} from +{:.1} s ({}/{n} ready then)",
                    (t - start) as f64 / 1000.0,
                    count[2]
                ),
            }),
        }
    }
    out
}

/// Up to this many processes, the timeline opens every group; beyond, the groups and nodes where
/// nothing failed or restarted start closed (one bar each).
pub const OPEN_ALL_UP_TO: usize = 40;

/// What every picture of the page shares: the time axis, where the servable moments are, the
/// page's width.
struct Frame {
    scale: Scale,
    step: u64,
    servable: Vec<(u64, String)>,
}

impl Frame {
    /// One `<svg>` of `rows` rows: the ticks (labelled when `labels`), the servable lines, then
    /// `body`.
    fn svg(&self, class: &str, rows: usize, labels: bool, body: &str) -> String {
        let top = if labels { TOP } else { 0.0 };
        let height = top + rows.max(1) as f64 * ROW;
        let mut out = format!(
            r#"<svg xmlns="http://www.w3.org/2000/svg" class="{class}" width="{w:.0}" height="{height:.0}">"#,
            w = LEFT + WIDTH + 40.0,
        );
        if labels {
            let (start, end) = (self.scale.start, self.scale.end);
            for k in 0..=(end - start) / self.step {
                let _ = write!(
                    out,
                    r#"<text class="tick" x="{x:.1}" y="{ty}">{s}</text>"#,
                    x = self.scale.x(start + k * self.step),
                    ty = TOP - 10.0,
                    s = tick_label(k * self.step, self.step)
                );
            }
        }
        // The tick lines and the servable lines are drawn once (`defs`) and used in each picture.
        let _ = write!(
            out,
            r##"<g transform="translate(0 {top:.1})"><use href="#tick-lines"/></g>{body}<g transform="translate(0 {top:.1})"><use href="#servable-lines"/></g></svg>"##
        );
        out
    }

    /// What every picture uses: the tick lines and the servable lines, as tall as any picture
    /// (each clips them to its height).
    fn defs(&self) -> String {
        let (start, end) = (self.scale.start, self.scale.end);
        let mut out = String::from(
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="0" height="0" class="defs"><defs><g id="tick-lines">"#,
        );
        for k in 0..=(end - start) / self.step {
            let _ = write!(
                out,
                r#"<line class="tick" x1="{x:.1}" x2="{x:.1}" y1="-6" y2="{DEFS_HEIGHT}"/>"#,
                x = self.scale.x(start + k * self.step),
            );
        }
        out.push_str(r#"</g><g id="servable-lines">"#);
        for (t, title) in &self.servable {
            let _ = write!(
                out,
                r#"<line class="servable" x1="{x:.1}" x2="{x:.1}" y1="0" y2="{DEFS_HEIGHT}"><title>{title}</title></line>"#,
                x = self.scale.x(*t),
                title = html_escape(title)
            );
        }
        out.push_str("</g></defs></svg>");
        out
    }
}

/// Taller than any one picture of the page (a node of 1,024 processes is 20,480 px).
const DEFS_HEIGHT: u32 = 1_000_000;

/// A row's label: right-aligned before the bars.
fn label(y: f64, text: &str) -> String {
    format!(
        r#"<text class="label" x="{x:.1}" y="{y:.1}">{t}</text>"#,
        x = LEFT - 8.0,
        y = y + ROW * 0.7,
        t = fit(text, LEFT - 8.0, 6.6)
    )
}

/// `text`, escaped, cut to what `width` px hold at `per_char` px a character (the start kept,
/// `…` for the rest, the whole of it on hover).
fn fit(text: &str, width: f64, per_char: f64) -> String {
    let room = (width / per_char) as usize;
    if text.chars().count() <= room {
        return html_escape(text);
    }
    let cut: String = text.chars().take(room.saturating_sub(1)).collect();
    format!(
        "{}&#8230;<title>{}</title>",
        html_escape(&cut),
        html_escape(text)
    )
}

/// The bars and marks of one row at `y`; `agg` bars carry `data-agg` instead of `data-phase`.
fn bars(out: &mut String, scale: &Scale, y: f64, spans: &[Span], agg: bool) {
    let x = |t: u64| scale.x(t);
    for s in spans {
        let _ = write!(
            out,
            r#"<rect class="bar {ph}{a}" {attr}="{ph}" data-from="{f}" data-to="{t}" x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}"><title>{title}</title></rect>"#,
            ph = s.phase,
            a = if agg { " agg" } else { "" },
            attr = if agg { "data-agg" } else { "data-phase" },
            f = s.from - scale.start,
            t = s.to - scale.start,
            x = x(s.from),
            y = y + 3.0,
            w = (x(s.to) - x(s.from)).max(2.0),
            h = ROW - 6.0,
            title = html_escape(&s.title)
        );
    }
}

fn marks(out: &mut String, scale: &Scale, y: f64, marks: &[&(u64, String, String)]) {
    for (t, kind, title) in marks {
        let _ = write!(
            out,
            r#"<circle class="mark {kind}" data-mark="{kind}" cx="{cx:.1}" cy="{cy:.1}" r="4"><title>{title}</title></circle>"#,
            cx = scale.x(*t),
            cy = y + ROW / 2.0,
            title = html_escape(title)
        );
    }
}

/// One process's row at `y`.
fn draw_process(out: &mut String, scale: &Scale, y: f64, node: &str, row: &Row, is_first: bool) {
    let _ = write!(
        out,
        r#"<g class="process{c}" data-node="{n}" data-process="{p}"{a}>"#,
        c = if is_first { " first-failure" } else { "" },
        a = if is_first {
            r#" data-first-failure="true""#
        } else {
            ""
        },
        n = html_escape(node),
        p = html_escape(row.name),
    );
    let pre = if is_first { "first failure: " } else { "" };
    out.push_str(&label(y, &format!("{pre}{node} / {}", row.name)));
    bars(out, scale, y, &row.spans, false);
    marks(out, scale, y, &row.marks.iter().collect::<Vec<_>>());
    out.push_str("</g>");
}

/// The summary line of a closed group or node: a disclosure sign, its label and one bar.
fn summary_bar(frame: &Frame, indent: f64, text: &str, rows: &[&Row]) -> String {
    let mut body = format!(
        r#"<text class="twisty closed" x="{x:.1}" y="{y:.1}">&#9656;</text><text class="twisty opened" x="{x:.1}" y="{y:.1}">&#9662;</text><text class="group-label" x="{lx:.1}" y="{y:.1}">{t}</text>"#,
        x = 4.0 + indent,
        lx = 18.0 + indent,
        y = ROW * 0.7,
        t = fit(text, LEFT - 26.0 - indent, 7.4),
    );
    let spans = aggregate(rows, text, frame.scale.start);
    bars(&mut body, &frame.scale, 0.0, &spans, true);
    let trouble: Vec<&(u64, String, String)> = rows
        .iter()
        .flat_map(|r| r.marks.iter())
        .filter(|(_, k, _)| k == "failed" || k == "restart")
        .collect();
    marks(&mut body, &frame.scale, 0.0, &trouble);
    frame.svg("summary", 1, false, &body)
}

/// `mcsup timeline`: every process of every node on one time axis (spawned -> ready ->
/// stopping -> gone, restarts and failures marked, failures in red with the reason on hover),
/// grouped by the role each serves (`groups`, from the status files) and by node, each group and
/// node one bar when closed: in a job of more than [`OPEN_ALL_UP_TO`] processes, those where
/// nothing failed or restarted start closed. The job's first failure and its servable moment are
/// at the top. One self-contained HTML file: inline SVG and CSS, `<details>` to open a group, no
/// script, no external asset. Pure: the caller reads the files.
pub fn timeline_html(nodes: &[(String, Vec<EventRecord>)], groups: &Groups) -> String {
    let all = nodes.iter().flat_map(|(_, evs)| evs.iter());
    let start = all.clone().map(|e| e.ts_ms).min().unwrap_or(0);
    let end = all.map(|e| e.ts_ms).max().unwrap_or(start).max(start + 1);
    let scale = Scale { start, end };
    let story = super::why::story(nodes);
    let first = story.first.as_ref();
    let drained_list: Vec<&str> = story.drained().map(|n| n.node).collect();
    let drained: HashSet<&str> = drained_list.iter().copied().collect();
    let servable: Vec<(u64, String)> = nodes
        .iter()
        .flat_map(|(n, evs)| {
            evs.iter()
                .filter(|e| e.event == EventKind::Servable)
                .map(move |e| {
                    (
                        e.ts_ms,
                        format!("{n}: servable: {}", e.detail.as_deref().unwrap_or("")),
                    )
                })
        })
        .collect();
    let rows = rows_of(nodes, end);
    let frame = Frame {
        scale,
        step: tick_step(end - start),
        servable,
    };
    // Group -> node -> its rows, in the job's order.
    let mut tree: BTreeMap<Group, Vec<(usize, Vec<&Row>)>> = BTreeMap::new();
    for r in &rows {
        let nodes_of = tree.entry(groups.of(&nodes[r.node].0, r.name)).or_default();
        match nodes_of.last_mut() {
            Some((k, rs)) if *k == r.node => rs.push(r),
            _ => nodes_of.push((r.node, vec![r])),
        }
    }
    let page = Page {
        nodes,
        frame: &frame,
        first,
        drained: &drained,
        open_all: rows.len() <= OPEN_ALL_UP_TO,
    };
    let mut body = String::new();
    for (group, members) in &tree {
        page.group(&mut body, group, members);
    }
    let head = page.top(&rows, story.headline());
    let servable_line = frame.servable.iter().map(|(t, title)| {
        format!(
            r#"<p class="servable" id="servable">servable at +{:.1} s ({})</p>"#,
            (t - start) as f64 / 1000.0,
            html_escape(title)
        )
    });
    let total_s = (end - start) as f64 / 1000.0;
    format!(
        r#"<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>mcsup timeline</title>
<style>
body {{ font: 12px sans-serif; margin: 12px; }}
.label {{ text-anchor: end; }} .group-label {{ font-weight: bold; }}
svg {{ display: block; overflow: hidden; }} svg.defs {{ position: absolute; }}
summary {{ list-style: none; cursor: pointer; display: block; }}
summary::-webkit-details-marker {{ display: none; }}
details[open] > summary .twisty.closed, details:not([open]) > summary .twisty.opened {{ display: none; }}
details.group {{ border-top: 1px solid #ccc; }}
line.tick {{ stroke: #eee; }} text.tick {{ fill: #555; text-anchor: middle; }}
.bar.starting {{ fill: #f0b429; }} .bar.ready {{ fill: #3f9142; }}
.bar.stopping {{ fill: #8a8a8a; }} .bar.failed {{ fill: #d64545; }} .bar.agg {{ opacity: 0.75; }}
.mark.failed {{ fill: #d64545; }} .mark.restart {{ fill: #1f6feb; }} .mark.wait {{ fill: #f0b429; stroke: #7a5a00; }}
.mark.servable {{ fill: #3f9142; stroke: #000; }} .mark.lost {{ fill: #e8743b; stroke: #000; }} .mark.back {{ fill: #3f9142; }}
.shutdown {{ stroke: #d64545; stroke-dasharray: 4 3; }}
.servable {{ stroke: #3f9142; stroke-width: 2; }}
.band {{ fill: #f3f4f6; }} .band.first {{ fill: #fde8e8; }}
.shutdown.drained {{ stroke: #8a8a8a; }}
p.first-failure {{ color: #a61b1b; font-weight: bold; }} p.servable {{ color: #2b6b2d; }}
</style></head>
<body>
<h1>mcsup timeline: {n} node(s), {p} process(es), {total_s:.1} s</h1>
{banner}{servable}
<p>amber: spawned, waiting to be ready; green: ready; grey: stopping; red: failed (hover for the reason); dots: restarts (blue), failures (red), long readiness waits (amber); dashed red line: shutdown requested (grey: a node drained because of the first failure, which is the row at the top); green line (and black-ringed green dot): the job became servable; black-ringed orange dot: the frontend lost workers or its canary failed, green dot: it has them all again or the canary generates again (on the benchmark's row: its result; red: benchmark-invalid). Processes are grouped by the role they serve and by node: click a group or a node to open or close it (a closed one is one bar: red while any of its processes is down, grey while any stops, green while all are ready).</p>
{defs}{head}
{body}
</body></html>
"#,
        n = nodes.len(),
        p = rows.len(),
        banner = story.headline().map_or_else(String::new, |h| format!(
            r#"<p class="first-failure" id="first-failure">{}{}</p>"#,
            html_escape(&h),
            if drained_list.is_empty() {
                String::new()
            } else {
                html_escape(&format!(
                    "; drained because of it: {}",
                    crate::node::compress_nodelist(&drained_list)
                ))
            }
        )),
        servable = servable_line.collect::<String>(),
        defs = frame.defs(),
    )
}

/// What drawing a group needs of the page.
struct Page<'a> {
    nodes: &'a [(String, Vec<EventRecord>)],
    frame: &'a Frame,
    first: Option<&'a super::why::Failure<'a>>,
    drained: &'a HashSet<&'a str>,
    /// A small job: every group and node open.
    open_all: bool,
}

impl Page<'_> {
    fn is_first(&self, r: &Row) -> bool {
        self.first
            .is_some_and(|f| self.nodes[r.node].0 == f.node && r.name == f.process)
    }

    fn troubled(&self, rs: &[&Row]) -> bool {
        rs.iter().any(|r| r.troubled() || self.is_first(r))
    }

    fn node(&self, out: &mut String, k: usize, rs: &[&Row], open: bool, indent: f64) {
        let view = NodeView {
            open,
            drained: self.drained.contains(self.nodes[k].0.as_str()),
            first: self.first,
            indent,
        };
        draw_node(out, self.frame, self.nodes, k, rs, view);
    }

    /// One group: its bar, then its nodes. Open when the job is small or something in it failed
    /// or restarted; then the nodes where something did come first, open, and the others behind
    /// one more bar.
    fn group(&self, out: &mut String, group: &Group, members: &[(usize, Vec<&Row>)]) {
        let all_rows: Vec<&Row> = members
            .iter()
            .flat_map(|(_, rs)| rs.iter().copied())
            .collect();
        let open = self.open_all || self.troubled(&all_rows);
        let _ = write!(
            out,
            r#"<details class="group" data-group="{g}"{o}><summary>{s}</summary>"#,
            g = html_escape(&group.name),
            o = if open { " open" } else { "" },
            s = summary_bar(
                self.frame,
                0.0,
                &format!("{}: {} node(s)", group.name, members.len()),
                &all_rows,
            )
        );
        if self.open_all || !open {
            for (k, rs) in members {
                self.node(out, *k, rs, self.open_all, 14.0);
            }
        } else {
            let (bad, good): (Vec<_>, Vec<_>) =
                members.iter().partition(|(_, rs)| self.troubled(rs));
            for (k, rs) in &bad {
                self.node(out, *k, rs, true, 14.0);
            }
            if !good.is_empty() {
                let good_rows: Vec<&Row> =
                    good.iter().flat_map(|(_, rs)| rs.iter().copied()).collect();
                let _ = write!(
                    out,
                    r#"<details class="healthy"><summary>{}</summary>"#,
                    summary_bar(
                        self.frame,
                        14.0,
                        &format!("{} other node(s): none failed", good.len()),
                        &good_rows
                    )
                );
                for (k, rs) in &good {
                    self.node(out, *k, rs, false, 28.0);
                }
                out.push_str("</details>");
            }
        }
        out.push_str("</details>");
    }

    /// The top picture: the time axis, the job's moments (servable, the first failure, told by
    /// `headline`), then the first failure's own row.
    fn top(&self, rows: &[Row], headline: Option<String>) -> String {
        let mut top = label(TOP, "job");
        let mut moments: Vec<(u64, String, String)> = self
            .frame
            .servable
            .iter()
            .map(|(t, title)| (*t, "servable".to_string(), title.clone()))
            .collect();
        if let Some(f) = self.first {
            moments.push((f.ts_ms, "failed".into(), headline.unwrap_or_default()));
        }
        marks(
            &mut top,
            &self.frame.scale,
            TOP,
            &moments.iter().collect::<Vec<_>>(),
        );
        let mut top_rows = 1;
        if let Some(r) = rows.iter().find(|r| self.is_first(r)) {
            let _ = write!(
                top,
                r#"<rect class="band first" x="0" y="{y:.1}" width="{w:.1}" height="{h:.1}"/>"#,
                y = TOP + ROW,
                w = LEFT + WIDTH + 20.0,
                h = ROW
            );
            let node = &self.nodes[r.node].0;
            draw_process(&mut top, &self.frame.scale, TOP + ROW, node, r, true);
            top_rows += 1;
        }
        self.frame.svg("top", top_rows, true, &top)
    }
}

/// How one node of a group is drawn.
struct NodeView<'a> {
    open: bool,
    /// How far its label is indented (px).
    indent: f64,
    drained: bool,
    first: Option<&'a super::why::Failure<'a>>,
}

/// One node's part of a group: a `<details>` whose summary is the node's bar and whose body is
/// its processes' rows, with the node's shutdown requests across them.
fn draw_node(
    out: &mut String,
    frame: &Frame,
    nodes: &[(String, Vec<EventRecord>)],
    k: usize,
    rs: &[&Row],
    view: NodeView,
) {
    let (node, evs) = &nodes[k];
    let mut rows = String::new();
    let mut lines = String::new();
    let height = rs.len() as f64 * ROW;
    for (i, r) in rs.iter().enumerate() {
        if i % 2 == 1 {
            let _ = write!(
                rows,
                r#"<rect class="band" x="0" y="{y:.1}" width="{w:.1}" height="{h:.1}"/>"#,
                y = i as f64 * ROW,
                w = LEFT + WIDTH + 20.0,
                h = ROW
            );
        }
        draw_process(&mut rows, &frame.scale, i as f64 * ROW, node, r, false);
    }
    for e in evs
        .iter()
        .filter(|e| e.process == "mcsup" && e.event == EventKind::ShutdownRequested)
    {
        let because = match view.first {
            Some(f) if view.drained && e.ts_ms >= f.ts_ms => format!(
                " (drained because of the first failure, {}/{})",
                f.node, f.process
            ),
            _ => String::new(),
        };
        let _ = write!(
            lines,
            r#"<line class="shutdown{c}" data-node="{n}" x1="{x:.1}" x2="{x:.1}" y1="0" y2="{height:.1}"><title>{n}: shutdown requested: {d}{b}</title></line>"#,
            c = if because.is_empty() { "" } else { " drained" },
            n = html_escape(node),
            x = frame.scale.x(e.ts_ms),
            d = html_escape(e.detail.as_deref().unwrap_or("")),
            b = html_escape(&because),
        );
    }
    rows.push_str(&lines);
    let _ = write!(
        out,
        r#"<details class="node" data-node="{n}"{o}><summary>{s}</summary>{b}</details>"#,
        n = html_escape(node),
        o = if view.open { " open" } else { "" },
        s = summary_bar(
            frame,
            view.indent,
            &format!(
                "{node}: {} process(es){}",
                rs.len(),
                if view.drained { ", drained" } else { "" }
            ),
            rs,
        ),
        b = frame.svg("rows", rs.len(), false, &rows),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(spans: &[(u64, u64, &'static str)]) -> Row<'static> {
        Row {
            node: 0,
            name: "p",
            spans: spans
                .iter()
                .map(|(from, to, phase)| Span {
                    from: *from,
                    to: *to,
                    phase,
                    title: String::new(),
                })
                .collect(),
            marks: Vec::new(),
        }
    }

    #[test]
    fn the_coordinators_decisions_are_marks_on_the_workers_row() {
        let ev = |t: u64, event: EventKind, detail: &str| EventRecord {
            ts_ms: t,
            t_ms: t as f64,
            node: "n1".into(),
            process: "decode[0]".into(),
            event,
            pid: None,
            exit_code: None,
            signal: None,
            detail: Some(detail.into()),
            diagnosis: None,
        };
        let evs = [
            ev(
                10,
                EventKind::UnitRestart,
                "generation 1: its rank on n3 ended",
            ),
            ev(20, EventKind::UnitFailed, "restart limit reached"),
        ];
        let refs: Vec<&EventRecord> = evs.iter().collect();
        let (spans, marks) = spans_of(&refs, 100);
        assert!(spans.is_empty());
        let kinds: Vec<(u64, &str)> = marks.iter().map(|(t, k, _)| (*t, k.as_str())).collect();
        assert_eq!(kinds, [(10, "restart"), (20, "failed")]);
        assert!(marks[0].2.contains("generation 1"));
    }

    #[test]
    fn a_node_still_running_draws_its_open_spans_to_the_end_of_the_picture() {
        let ev = |node: &str, t: u64, process: &str, event: EventKind| EventRecord {
            ts_ms: t,
            t_ms: t as f64,
            node: node.into(),
            process: process.into(),
            event,
            pid: None,
            exit_code: None,
            signal: None,
            detail: None,
            diagnosis: None,
        };
        let nodes = vec![
            (
                "n1".to_string(),
                vec![
                    ev("n1", 0, "w", EventKind::Spawned),
                    ev("n1", 10, "w", EventKind::Ready),
                    ev("n1", 100, "mcsup", EventKind::Finished),
                    ev("n1", 200, "mcsup", EventKind::ShutdownRequested),
                ],
            ),
            (
                "n2".to_string(),
                vec![
                    ev("n2", 0, "w", EventKind::Spawned),
                    ev("n2", 50, "w", EventKind::Ready),
                ],
            ),
        ];
        let rows = rows_of(&nodes, 200);
        let ends: Vec<(usize, u64)> = rows
            .iter()
            .map(|r| (r.node, r.spans.last().unwrap().to))
            .collect();
        // n1's mcsup finished at 100: its spans end there; n2's runs on to the picture's end.
        assert_eq!(ends, [(0, 100), (1, 200)]);
    }

    #[test]
    fn a_group_bar_is_ready_only_while_all_are_and_red_while_any_is_down() {
        // a: starting 0-10, ready 10-50, failed 50-60, starting 60-70, ready 70-100.
        // b: starting 5-20, ready 20-90, stopping 90-100.
        let a = row(&[
            (0, 10, "starting"),
            (10, 50, "ready"),
            (50, 60, "failed"),
            (60, 70, "starting"),
            (70, 100, "ready"),
        ]);
        let b = row(&[
            (5, 20, "starting"),
            (20, 90, "ready"),
            (90, 100, "stopping"),
        ]);
        let got: Vec<(u64, u64, &str)> = aggregate(&[&a, &b], "g", 0)
            .iter()
            .map(|s| (s.from, s.to, s.phase))
            .collect();
        assert_eq!(
            got,
            [
                (0, 20, "starting"),
                (20, 50, "ready"),
                (50, 60, "failed"),
                (60, 70, "starting"),
                (70, 90, "ready"),
                (90, 100, "stopping"),
            ]
        );
        // Nothing drawn where nothing runs; a zero-length span changes nothing.
        let c = row(&[(10, 20, "ready"), (30, 30, "failed"), (40, 50, "ready")]);
        let got: Vec<(u64, u64, &str)> = aggregate(&[&c], "g", 0)
            .iter()
            .map(|s| (s.from, s.to, s.phase))
            .collect();
        assert_eq!(got, [(10, 20, "ready"), (40, 50, "ready")]);
    }

    #[test]
    fn labels_are_cut_to_the_room_they_have_and_whole_on_hover() {
        assert_eq!(fit("n1 / worker", 110.0, 10.0), "n1 / worker");
        assert_eq!(
            fit("a-very-long-<name>", 100.0, 10.0),
            "a-very-lo&#8230;<title>a-very-long-&lt;name&gt;</title>"
        );
    }

    #[test]
    fn ticks_are_round_and_few() {
        for (span, step) in [
            (1, 1),
            (800, 100),
            (17_100, 2_000),
            (60_000, 10_000),
            (14 * 60_000, 2 * 60_000),
            (3_600_000, 10 * 60_000),
            (9 * 3_600_000, 3_600_000),
            (30 * 3_600_000, 5 * 3_600_000),
        ] {
            assert_eq!(tick_step(span), step, "span {span} ms");
        }
        // Whatever the span (an events file is input): at most 11 ticks.
        for span in [10u64.pow(15), 10u64.pow(18), u64::MAX / 2, u64::MAX] {
            let step = tick_step(span);
            assert!(span / step <= 10, "span {span} ms, step {step}");
        }
        assert_eq!(tick_label(300, 100), "300 ms");
        assert_eq!(tick_label(1_500, 500), "1.5 s");
        assert_eq!(tick_label(12_000, 2_000), "12 s");
        assert_eq!(tick_label(360_000, 120_000), "6 min");
        assert_eq!(tick_label(120_000, 60_000), "2 min");
        assert_eq!(tick_label(7_200_000, 3_600_000), "2 h");
    }
}

//! Server-side SVG line charts for the Training page: reward, loss and KL per
//! step, and policy versions, checkpoints and hot swaps on a time axis. No
//! JavaScript: hover tooltips are `<title>` children. The page inserts the
//! SVG unescaped, so every text in it goes through [`escape`]. Colors are
//! presentation attributes (not `style=`, which the dashboard's CSP blocks),
//! and the CSS classes let the page's stylesheet override them.

use std::fmt::{self, Write as _};

use chrono::TimeZone;

/// One line: `(x, y)` points; a point with a non-finite x or y is a gap.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// A dashed vertical line at `x`, its label in a hover tooltip.
pub struct Marker {
    pub x: f64,
    pub label: String,
    pub kind: MarkerKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkerKind {
    Policy,
    Checkpoint,
    Swap,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XAxis {
    /// Training steps: integer tick labels.
    Steps,
    /// Unix milliseconds: local-time tick labels.
    TimeMs,
}

pub struct Chart {
    pub title: String,
    pub y_label: String,
    pub x_axis: XAxis,
    pub series: Vec<Series>,
    pub markers: Vec<Marker>,
    pub width: u32,
    pub height: u32,
}

/// Okabe–Ito colors: told apart by color-blind readers, readable on white.
const PALETTE: [&str; 4] = ["#0072B2", "#D55E00", "#009E73", "#CC79A7"];
const LEFT: f64 = 56.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 28.0;
const BOTTOM: f64 = 24.0;
/// Denser series get no dots: a dot each would bloat the page and hide the line.
const MAX_DOTS: usize = 120;
const DAY_MS: f64 = 86_400_000.0;

/// Text made safe for SVG/HTML element content and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // Not allowed in XML at all.
            c if c.is_control() && !matches!(c, '\n' | '\t') => {}
            c => out.push(c),
        }
    }
    out
}

/// A pixel coordinate rounded to 1 decimal, without a trailing ".0".
struct Px(f64);

impl fmt::Display for Px {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `+ 0.0` turns -0 into 0.
        let v = (self.0 * 10.0).round() / 10.0 + 0.0;
        let decimals = usize::from(v.fract() != 0.0);
        write!(f, "{v:.decimals$}")
    }
}

/// A step of 1, 2 or 5 × 10^k giving about `target` intervals over `span`.
fn nice_step(span: f64, target: usize) -> f64 {
    if !span.is_finite() || span <= 0.0 {
        return 1.0;
    }
    let raw = span / target.max(1) as f64;
    let magnitude = 10f64.powf(raw.log10().floor());
    let nice = [1.0, 2.0, 5.0].into_iter().find(|n| raw / magnitude <= *n);
    nice.unwrap_or(10.0) * magnitude
}

/// The multiples of `step` within `[lo, hi]`; none if there would be absurdly many.
fn ticks(lo: f64, hi: f64, step: f64) -> Vec<f64> {
    // The epsilon keeps a bound that is a multiple but for float noise.
    let (first, last) = ((lo / step - 1e-9).ceil(), (hi / step + 1e-9).floor());
    if !(0.0..=100.0).contains(&(last - first)) {
        return Vec::new();
    }
    let count = (last - first) as usize + 1;
    (0..count)
        .map(|k| (first + k as f64) * step + 0.0)
        .collect()
}

/// A tick label with just the decimals `step` needs.
fn tick_label(v: f64, step: f64) -> String {
    let decimals = (-step.log10().floor()).clamp(0.0, 4.0) as usize;
    if decimals > 3 {
        return format!("{v:.1e}");
    }
    trim_zeros(format!("{v:.decimals$}"))
}

/// A value for a tooltip: up to 3 decimals.
fn value_label(v: f64) -> String {
    if v != 0.0 && v.abs() < 0.001 {
        return format!("{v:.2e}");
    }
    trim_zeros(format!("{v:.3}"))
}

fn trim_zeros(number: String) -> String {
    if !number.contains('.') {
        return number;
    }
    match number.trim_end_matches('0').trim_end_matches('.') {
        "-0" => "0".into(),
        trimmed => trimmed.into(),
    }
}

fn local_time(ms: f64, format: &str) -> String {
    let time = chrono::Local
        .timestamp_millis_opt(ms.round() as i64)
        .earliest();
    time.map(|t| t.format(format).to_string())
        .unwrap_or_default()
}

/// Ticks over a time span, on round local times, with their labels.
fn time_ticks(lo: f64, hi: f64, target: usize) -> Vec<(f64, String)> {
    const STEPS_S: [f64; 17] = [
        1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0, 7200.0,
        10800.0, 21600.0, 43200.0,
    ];
    let raw = (hi - lo) / target.max(1) as f64;
    let step = (STEPS_S.iter().map(|s| s * 1000.0).find(|s| *s >= raw))
        .unwrap_or_else(|| nice_step((hi - lo) / DAY_MS, target).max(1.0) * DAY_MS);
    let format = match (hi - lo >= DAY_MS, step < 60_000.0) {
        (true, _) => "%m-%d %H:%M",
        (false, true) => "%H:%M:%S",
        (false, false) => "%H:%M",
    };
    // Aligned in local time, so that day steps fall on local midnight.
    let offset = (chrono::Local.timestamp_millis_opt(lo as i64).earliest())
        .map_or(0.0, |t| f64::from(t.offset().local_minus_utc()) * 1000.0);
    let aligned = ticks(lo + offset, hi + offset, step).into_iter();
    aligned
        .map(|t| (t - offset, local_time(t - offset, format)))
        .collect()
}

fn finite(point: &&(f64, f64)) -> bool {
    point.0.is_finite() && point.1.is_finite()
}

fn min_max(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    let widen = |(lo, hi): (f64, f64), v: f64| (lo.min(v), hi.max(v));
    values.fold(None, |acc, v| Some(acc.map_or((v, v), |acc| widen(acc, v))))
}

/// Per pixel column, only the lowest and highest point (in their order):
/// the line looks the same and a one-point spike stays visible.
fn downsample(run: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut kept = Vec::new();
    for group in run.chunk_by(|a, b| a.0.floor() as i64 == b.0.floor() as i64) {
        let (mut low, mut high) = (0, 0);
        for (i, p) in group.iter().enumerate() {
            if p.1 < group[low].1 {
                low = i;
            }
            if p.1 > group[high].1 {
                high = i;
            }
        }
        kept.push(group[low.min(high)]);
        if low != high {
            kept.push(group[low.max(high)]);
        }
    }
    kept
}

/// The SVG being written, its plot area in pixels and the data domain shown.
struct Canvas {
    out: String,
    left: f64,
    top: f64,
    right: f64,
    bottom: f64,
    x: (f64, f64),
    y: (f64, f64),
}

impl Canvas {
    fn px(&self, x: f64) -> f64 {
        self.left + (x - self.x.0) / (self.x.1 - self.x.0) * (self.right - self.left)
    }

    fn py(&self, y: f64) -> f64 {
        self.bottom - (y - self.y.0) / (self.y.1 - self.y.0) * (self.bottom - self.top)
    }

    fn line(&mut self, attrs: &str, from: (f64, f64), to: (f64, f64)) -> fmt::Result {
        let (x1, y1, x2, y2) = (Px(from.0), Px(from.1), Px(to.0), Px(to.1));
        let line = format!(r#"<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" {attrs}/>"#);
        self.out.write_str(&line)
    }

    fn text(&mut self, attrs: &str, at: (f64, f64), content: &str) -> fmt::Result {
        let (x, y, content) = (Px(at.0), Px(at.1), escape(content));
        let text = format!(r#"<text x="{x}" y="{y}" {attrs}>{content}</text>"#);
        self.out.write_str(&text)
    }
}

const GRID: &str = r#"class="chart-grid" stroke="currentColor" stroke-opacity="0.12""#;
const ZERO: &str = r#"class="chart-zero" stroke="currentColor" stroke-opacity="0.5""#;
const HIT: &str = r#"class="chart-marker-hit" stroke="transparent" stroke-width="8""#;
const Y_TICK: &str = r#"class="chart-tick" dy="0.32em" text-anchor="end""#;
const X_TICK: &str = r#"class="chart-tick" text-anchor="middle""#;
const TITLE: &str = r#"class="chart-title" font-weight="600" font-size="13""#;
const Y_LABEL: &str = r#"class="chart-label" transform="rotate(-90)" text-anchor="middle""#;
const EMPTY: &str = r#"class="chart-empty" text-anchor="middle" fill-opacity="0.6""#;

impl Chart {
    /// The chart as a standalone `<svg>` element.
    pub fn svg(&self) -> String {
        let (w, h) = (self.width.max(160), self.height.max(100));
        let (right, bottom) = (f64::from(w) - RIGHT, f64::from(h) - BOTTOM);
        let (out, x, y) = (String::with_capacity(8192), (0.0, 1.0), (0.0, 1.0));
        let mut canvas = Canvas {
            out,
            left: LEFT,
            top: TOP,
            right,
            bottom,
            x,
            y,
        };
        // Writing to a String cannot fail.
        match self.write_svg(&mut canvas, w, h) {
            Ok(()) => canvas.out,
            Err(_) => String::new(),
        }
    }

    fn x_label(&self, x: f64) -> String {
        match self.x_axis {
            XAxis::Steps => format!("step {}", value_label(x)),
            XAxis::TimeMs => local_time(x, "%m-%d %H:%M:%S"),
        }
    }

    fn points(&self) -> impl Iterator<Item = &(f64, f64)> {
        self.series
            .iter()
            .flat_map(|s| s.points.iter().filter(finite))
    }

    /// Over the points and the markers; widened when it is a single x.
    fn x_domain(&self) -> Option<(f64, f64)> {
        let marks = self.markers.iter().map(|m| m.x).filter(|x| x.is_finite());
        let (lo, hi) = min_max(self.points().map(|p| p.0).chain(marks))?;
        let time = self.x_axis == XAxis::TimeMs;
        let pad = if hi > lo {
            0.0
        } else if time {
            60_000.0
        } else {
            1.0
        };
        Some((lo - pad, hi + pad))
    }

    /// The y domain widened to whole ticks, and the tick step.
    fn y_domain(&self) -> Option<((f64, f64), f64)> {
        let (mut lo, mut hi) = min_max(self.points().map(|p| p.1))?;
        if hi <= lo {
            let pad = if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
            (lo, hi) = (lo - pad, hi + pad);
        }
        let step = nice_step(hi - lo, 5);
        let domain = ((lo / step).floor() * step, (hi / step).ceil() * step);
        Some((domain, step))
    }

    fn write_svg(&self, c: &mut Canvas, w: u32, h: u32) -> fmt::Result {
        let title = escape(&self.title);
        write!(
            c.out,
            r#"<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" aria-label="{title}" font-family="system-ui, sans-serif" font-size="11" fill="currentColor"><title>{title}</title>"#,
        )?;
        c.text(TITLE, (LEFT, 16.0), &self.title)?;
        self.write_legend(c)?;
        let middle = (c.top + c.bottom) / 2.0;
        c.text(Y_LABEL, (-middle, 12.0), &self.y_label)?;
        let y_domain = self.y_domain();
        if let Some(((lo, hi), step)) = y_domain {
            c.y = (lo, hi);
            for t in ticks(lo, hi, step) {
                c.line(GRID, (c.left, c.py(t)), (c.right, c.py(t)))?;
                c.text(Y_TICK, (c.left - 6.0, c.py(t)), &tick_label(t, step))?;
            }
            if lo < 0.0 && hi > 0.0 {
                c.line(ZERO, (c.left, c.py(0.0)), (c.right, c.py(0.0)))?;
            }
        }
        let x_domain = self.x_domain();
        if let Some(x_domain) = x_domain {
            c.x = x_domain;
            self.write_x_ticks(c)?;
        }
        let (l, t, b, r) = (Px(c.left), Px(c.top), Px(c.bottom), Px(c.right));
        write!(
            c.out,
            r#"<path class="chart-axis" d="M{l} {t}V{b}H{r}" fill="none" stroke="currentColor" stroke-opacity="0.6"/>"#
        )?;
        if x_domain.is_some() {
            self.write_markers(c)?;
        }
        if y_domain.is_none() {
            c.text(EMPTY, ((c.left + c.right) / 2.0, middle), "no data yet")?;
        }
        for (i, series) in self.series.iter().enumerate() {
            self.write_series(c, i, series)?;
        }
        c.out.write_str("</svg>")
    }

    fn write_legend(&self, c: &mut Canvas) -> fmt::Result {
        if self.series.len() < 2 {
            return Ok(());
        }
        // Right-aligned in the title row; text widths estimated, no font metrics here.
        let width = |s: &Series| 26.0 + 6.5 * s.name.chars().count() as f64;
        let mut x = c.right - self.series.iter().map(width).sum::<f64>();
        c.out.write_str(r#"<g class="chart-legend">"#)?;
        for (i, series) in self.series.iter().enumerate() {
            let (class, color) = (i % PALETTE.len(), PALETTE[i % PALETTE.len()]);
            let paint = format!(r#"class="chart-line s{class}" stroke="{color}" stroke-width="2""#);
            c.line(&paint, (x, 12.0), (x + 12.0, 12.0))?;
            c.text(
                r#"class="chart-legend-name""#,
                (x + 16.0, 16.0),
                &series.name,
            )?;
            x += width(series);
        }
        c.out.write_str("</g>")
    }

    fn write_x_ticks(&self, c: &mut Canvas) -> fmt::Result {
        let (lo, hi) = c.x;
        // About one label per 90 px: "MM-DD HH:MM" is ~70 px wide.
        let target = ((c.right - c.left) / 90.0).clamp(2.0, 8.0) as usize;
        let step = nice_step(hi - lo, target).max(1.0);
        let labelled = match self.x_axis {
            XAxis::Steps => (ticks(lo, hi, step).into_iter())
                .map(|t| (t, tick_label(t, step)))
                .collect(),
            XAxis::TimeMs => time_ticks(lo, hi, target),
        };
        for (t, label) in labelled {
            c.line(GRID, (c.px(t), c.top), (c.px(t), c.bottom))?;
            c.text(X_TICK, (c.px(t), c.bottom + 15.0), &label)?;
        }
        Ok(())
    }

    fn write_markers(&self, c: &mut Canvas) -> fmt::Result {
        for marker in self.markers.iter().filter(|m| m.x.is_finite()) {
            let (class, what, color, dashes) = match marker.kind {
                MarkerKind::Policy => ("policy", "policy", "#56B4E9", "6 3"),
                MarkerKind::Checkpoint => ("checkpoint", "checkpoint", "currentColor", "2 3"),
                MarkerKind::Swap => ("swap", "hot swap", "#E69F00", "6 2 2 2"),
            };
            let tip = format!("{what} at {}: {}", self.x_label(marker.x), marker.label);
            let tip = escape(&tip);
            write!(
                c.out,
                r#"<g class="chart-marker {class}"><title>{tip}</title>"#
            )?;
            let (top, bottom) = ((c.px(marker.x), c.top), (c.px(marker.x), c.bottom));
            let paint = format!(
                r#"class="chart-marker-line" stroke="{color}" stroke-opacity="0.8" stroke-width="1.5" stroke-dasharray="{dashes}""#
            );
            c.line(&paint, top, bottom)?;
            // The wide transparent line is the hover target for the tooltip.
            c.line(HIT, top, bottom)?;
            c.out.write_str("</g>")?;
        }
        Ok(())
    }

    fn write_series(&self, c: &mut Canvas, i: usize, series: &Series) -> fmt::Result {
        let (class, color) = (i % PALETTE.len(), PALETTE[i % PALETTE.len()]);
        let mut runs: Vec<Vec<(f64, f64)>> = vec![Vec::new()];
        for point in &series.points {
            match runs.last_mut() {
                Some(run) if finite(&point) => run.push((c.px(point.0), c.py(point.1))),
                Some(run) if !run.is_empty() => runs.push(Vec::new()),
                _ => {}
            }
        }
        let count: usize = runs.iter().map(Vec::len).sum();
        if count == 0 {
            return Ok(());
        }
        if count as f64 > c.right - c.left {
            runs = runs.iter().map(|run| downsample(run)).collect();
        }
        let mut d = String::with_capacity(count.min(4096) * 12);
        for run in runs.iter().filter(|run| !run.is_empty()) {
            for (k, (x, y)) in run.iter().enumerate() {
                write!(d, "{}{} {}", if k == 0 { 'M' } else { 'L' }, Px(*x), Px(*y))?;
            }
            // A lone point between gaps: a zero-length segment, drawn as a round dot.
            if let [(x, y)] = run.as_slice() {
                write!(d, "L{} {}", Px(*x), Px(*y))?;
            }
        }
        let last = series.points.iter().rev().find(finite);
        let last = last.map(|p| format!(", last {}: {}", self.x_label(p.0), value_label(p.1)));
        let tip = escape(&format!("{}{}", series.name, last.unwrap_or_default()));
        write!(
            c.out,
            r#"<path class="chart-line s{class}" d="{d}" fill="none" stroke="{color}" stroke-width="1.5" stroke-linejoin="round" stroke-linecap="round"><title>{tip}</title></path>"#
        )?;
        if count > MAX_DOTS {
            return Ok(());
        }
        for &(x, y) in series.points.iter().filter(finite) {
            let (cx, cy) = (Px(c.px(x)), Px(c.py(y)));
            let tip = format!("{}: {} {}", self.x_label(x), series.name, value_label(y));
            let tip = escape(&tip);
            write!(
                c.out,
                r#"<circle class="chart-dot s{class}" cx="{cx}" cy="{cy}" r="2.5" fill="{color}"><title>{tip}</title></circle>"#
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart(x_axis: XAxis, points: Vec<(f64, f64)>) -> Chart {
        let series = vec![Series {
            name: "loss".into(),
            points,
        }];
        let (title, y_label, markers) = ("Loss".into(), "loss".into(), Vec::new());
        Chart {
            title,
            y_label,
            x_axis,
            series,
            markers,
            width: 760,
            height: 240,
        }
    }

    fn steps(points: Vec<(f64, f64)>) -> String {
        chart(XAxis::Steps, points).svg()
    }

    /// The first series path's commands: (letter, x, y).
    fn path(svg: &str) -> Vec<(char, f64, f64)> {
        let d = svg.split(r#"class="chart-line s0" d=""#).nth(1).unwrap();
        let d = d
            .split('"')
            .next()
            .unwrap()
            .replace('M', "\nM")
            .replace('L', "\nL");
        let command = |c: &str| {
            let (x, y) = c[1..].split_once(' ').unwrap();
            (
                c.chars().next().unwrap(),
                x.parse().unwrap(),
                y.parse().unwrap(),
            )
        };
        d.lines().filter(|c| !c.is_empty()).map(command).collect()
    }

    #[test]
    fn nice_ticks() {
        let ticks_over = |lo: f64, hi: f64| ticks(lo, hi, nice_step(hi - lo, 5));
        assert_eq!(ticks_over(-1.0, 1.0), vec![-1.0, -0.5, 0.0, 0.5, 1.0]);
        assert_eq!(ticks_over(3.0, 97.0), vec![20.0, 40.0, 60.0, 80.0]);
        assert_eq!(ticks_over(0.0, 1.0).len(), 6);
        assert_eq!(nice_step(10_000.0, 5), 2000.0);
        assert_eq!(nice_step(0.037, 5), 0.01);
        assert_eq!(tick_label(0.6000000000000001, 0.2), "0.6");
        assert_eq!(tick_label(4000.0, 2000.0), "4000");
        assert_eq!(tick_label(-1.0, 0.5), "-1");
        assert_eq!(tick_label(0.00030000000000000003, 0.0001), "3.0e-4");
        assert_eq!(value_label(0.73412), "0.734");
        assert_eq!(value_label(12.0), "12");
        assert_eq!(value_label(-0.0001), "-1.00e-4");
        assert!(ticks(-1e308, 1e308, nice_step(f64::INFINITY, 5)).is_empty());
        assert!(ticks(0.2, 0.7, 1.0).is_empty());
    }

    #[test]
    fn escapes_every_text() {
        let quoted = r#"<script>alert("x") & 'y'</script>"#;
        let escaped = "&lt;script&gt;alert(&quot;x&quot;) &amp; &#39;y&#39;&lt;/script&gt;";
        assert_eq!(escape(quoted), escaped);
        let mut c = chart(XAxis::Steps, vec![(0.0, 1.0)]);
        c.title = quoted.into();
        c.y_label = "</text><script>".into();
        c.series.push(Series {
            name: "<script>b\"".into(),
            points: vec![(1.0, 2.0)],
        });
        let label = "<b onclick='x'>".into();
        c.markers.push(Marker {
            x: 0.5,
            label,
            kind: MarkerKind::Swap,
        });
        let svg = c.svg();
        assert!(!svg.contains("<script") && !svg.contains("<b "), "{svg}");
        assert!(svg.contains(&format!(r#"aria-label="{escaped}""#)));
        assert!(svg.contains(&format!("<title>{escaped}</title>")));
        assert!(svg.contains(">&lt;script&gt;b&quot;</text>"));
        assert!(svg.contains("<title>hot swap at step 0.5: &lt;b onclick=&#39;x&#39;&gt;</title>"));
    }

    #[test]
    fn gaps_start_a_new_subpath() {
        let (nan, inf) = (f64::NAN, f64::INFINITY);
        let points = vec![
            (0.0, 1.0),
            (1.0, 2.0),
            (2.0, nan),
            (3.0, 1.0),
            (inf, 1.0),
            (5.0, 2.0),
        ];
        let svg = steps([points, vec![(6.0, 1.5)]].concat());
        let letters: String = path(&svg).iter().map(|c| c.0).collect();
        // The lone point at x=3 is a zero-length segment, joined to neither neighbour.
        assert_eq!(letters, "MLMLML");
        assert_eq!(svg.matches("<circle").count(), 5);
        assert!(svg.contains("<title>step 6: loss 1.5</title>"));
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
    }

    #[test]
    fn empty_says_no_data_yet() {
        let mut only_gaps = chart(XAxis::Steps, vec![(1.0, f64::NAN)]);
        only_gaps.series.push(Series {
            name: "kl".into(),
            points: Vec::new(),
        });
        for svg in [steps(Vec::new()), only_gaps.svg()] {
            assert!(svg.contains(">no data yet</text>") && svg.contains("chart-axis"));
            assert!(!svg.contains("chart-line s0\" d") && !svg.contains("chart-tick"));
            assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        }
        assert!(!steps(vec![(1.0, 0.5)]).contains("no data yet"));
    }

    #[test]
    fn single_point_and_flat_values_pad_the_domain() {
        let svg = steps(vec![(7.0, 0.5)]);
        assert_eq!(svg.matches("<circle").count(), 1);
        assert!(svg.contains(">0.45</text>") && svg.contains(">0.55</text>"));
        assert!(svg.contains(">7</text>") && svg.contains(">6</text>"));
        let flat = steps((0..10).map(|i| (f64::from(i), 0.0)).collect());
        assert!(flat.contains(">-1</text>") && flat.contains(">1</text>"));
        assert!(!flat.contains("NaN"));
    }

    #[test]
    fn downsampling_bounds_the_path_and_keeps_a_spike() {
        let wave = |i: i32| (f64::from(i), (f64::from(i) / 50.0).sin() * 0.5);
        let mut points: Vec<(f64, f64)> = (0..10_000).map(wave).collect();
        (points[5_003].1, points[7_003].1) = (1.0, -1.0);
        let svg = steps(points);
        let path = path(&svg);
        let plot_width = 760.0 - LEFT - RIGHT;
        assert!(
            path.len() as f64 <= 2.0 * (plot_width + 1.0),
            "{}",
            path.len()
        );
        assert!(svg.len() < 40_000, "{} bytes", svg.len());
        assert_eq!(svg.matches("<circle").count(), 0);
        // The spikes set the y domain, [-1, 1]: they are the plot's top and bottom.
        let bottom = 240.0 - BOTTOM;
        assert_eq!(path.iter().filter(|c| c.2 < TOP + 20.0).count(), 1);
        assert_eq!(path.iter().filter(|c| c.2 > bottom - 20.0).count(), 1);
        assert!(path.iter().any(|c| c.2 == TOP) && path.iter().any(|c| c.2 == bottom));
    }

    #[test]
    fn time_axis_labels_are_local_round_times() {
        use chrono::Timelike;
        let start = 1_700_000_123_456.0;
        let end = start + 7_200_000.0;
        let labels = time_ticks(start, end, 5);
        assert!((3..=6).contains(&labels.len()), "{labels:?}");
        for (t, label) in &labels {
            let local = chrono::Local.timestamp_millis_opt(*t as i64).unwrap();
            assert_eq!(label, &local.format("%H:%M").to_string());
            assert_eq!((local.minute() % 30, local.second()), (0, 0));
        }
        let svg = chart(XAxis::TimeMs, vec![(start, 0.1), (end, 0.3)]).svg();
        assert!(svg.contains(&format!(">{}</text>", labels[0].1)));
        let days = time_ticks(start, start + 3.0 * DAY_MS, 5);
        assert!(!days.is_empty());
        for (_, label) in &days {
            assert_eq!(
                (label.len(), &label[2..3], &label[8..9]),
                (11, "-", ":"),
                "{label}"
            );
        }
    }

    #[test]
    fn zero_line_only_when_data_crosses_zero() {
        let zero_lines = |lo: f64, hi: f64| {
            steps(vec![(0.0, lo), (1.0, hi)])
                .matches("chart-zero")
                .count()
        };
        assert_eq!(zero_lines(-0.5, 0.5), 1);
        assert_eq!(zero_lines(0.1, 0.9), 0);
        assert_eq!(zero_lines(-0.9, -0.1), 0);
    }

    #[test]
    fn legend_markers_and_accessibility() {
        let mut c = chart(XAxis::Steps, vec![(0.0, 1.0), (10.0, 0.5)]);
        let label = "v3".into();
        c.markers.push(Marker {
            x: 20.0,
            label,
            kind: MarkerKind::Checkpoint,
        });
        let single = c.svg();
        assert!(!single.contains("chart-legend"));
        assert!(single.contains(r#"role="img" aria-label="Loss""#));
        assert!(single.contains("<title>checkpoint at step 20: v3</title>"));
        // The marker widens the x domain: its line is at the plot's right edge.
        let right = 760.0 - RIGHT;
        assert!(single.contains(&format!(r#"<line x1="{right}" y1="{TOP}" x2="{right}""#)));
        c.series.push(Series {
            name: "kl".into(),
            points: vec![(0.0, 0.1)],
        });
        let two = c.svg();
        assert!(two.contains("chart-legend") && two.contains(">kl</text>"));
        assert!(two.contains(r#"<path class="chart-line s1""#));
    }
}

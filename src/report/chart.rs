//! A small chart description ([`Chart`]) and its rendering to PNG and SVG with `plotters`.
//!
//! Charts are described as data first (axes, series, styles), then drawn by one function that
//! is generic over the plotters backend, so the PNG and the SVG of a chart come from the same
//! drawing code. Axes are [`Scale`]: linear or log10, with tick positions chosen here (1-2-5
//! steps; decades on log axes), because plotters' own log axis puts no tick on a range that holds
//! no power of ten.
//!
//! Text is drawn with the bundled DejaVu Sans (`assets/fonts/`), registered with plotters'
//! `ab_glyph` backend under the family name `sans-serif`: no system font is looked up, so the
//! output is byte-identical on any machine. SVG text elements name `sans-serif`, which any
//! browser resolves.

use std::ops::Range;
use std::sync::Once;

use plotters::coord::Shift;
use plotters::coord::ranged1d::{KeyPointHint, KeyPointWeight, NoDefaultFormatting, Ranged, ValueFormatter};
use plotters::prelude::*;
use plotters::style::{FontStyle, register_font};

/// The bundled font (DejaVu Sans 2.37, Bitstream Vera license: assets/fonts/DejaVuSans-LICENSE.txt).
static FONT_TTF: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans.ttf");

/// Family name the bundled font is registered under (and that SVG text names).
const FONT: &str = "sans-serif";

/// Pixel size of every chart (PNG) and its SVG viewport.
pub const WIDTH_PX: u32 = 960;
pub const HEIGHT_PX: u32 = 540;

const TITLE_PX: u32 = 24;
const AXIS_LABEL_PX: u32 = 18;
const TICK_PX: u32 = 15;
const LEGEND_PX: u32 = 15;
const ANNOTATION_PX: u32 = 13;

fn register_bundled_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if register_font(FONT, FontStyle::Normal, FONT_TTF).is_err() {
            panic!("the bundled font assets/fonts/DejaVuSans.ttf does not parse");
        }
    });
}

/// The ten colours of matplotlib's `tab10`, for categorical series.
pub const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// Colour `i` of `n` on a dark-purple → green sequential ramp (viridis without its pale yellow
/// end, which vanishes on white), for series ordered by load.
pub fn ramp(i: usize, n: usize) -> RGBColor {
    const STOPS: [(f64, f64, f64); 5] =
        [(68.0, 1.0, 84.0), (59.0, 82.0, 139.0), (33.0, 145.0, 140.0), (53.0, 183.0, 121.0), (144.0, 215.0, 67.0)];
    let t = if n <= 1 { 0.0 } else { i as f64 / (n - 1) as f64 } * (STOPS.len() - 1) as f64;
    let k = (t.floor() as usize).min(STOPS.len() - 2);
    let f = t - k as f64;
    let (a, b) = (STOPS[k], STOPS[k + 1]);
    let mix = |x: f64, y: f64| (x + (y - x) * f).round() as u8;
    RGBColor(mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
}

/// How a series is drawn.
#[derive(Clone, Debug, PartialEq)]
pub enum Kind {
    /// A solid line through the points.
    Line,
    /// A solid line with a filled circle on each point.
    LineMarkers,
    /// A dashed line with a triangle on each point.
    DashedMarkers,
    /// A dashed line, no markers.
    Dashed,
    /// Hollow circles, no line.
    Markers,
    /// Hollow circles with vertical bars of ± `relative` × y: recorded values and a tolerance.
    ErrorBars { relative: f64 },
    /// A filled region between `lower[i]` and `points[i].1` (stacked areas, tolerance bands).
    Band { lower: Vec<f64> },
}

/// One data series.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// Legend entry; empty for none.
    pub name: String,
    pub color: RGBColor,
    pub kind: Kind,
    pub points: Vec<(f64, f64)>,
    /// Text drawn next to each point (empty: none; otherwise one per point).
    pub annotations: Vec<String>,
}

impl Series {
    pub fn new(name: impl Into<String>, color: RGBColor, kind: Kind, points: Vec<(f64, f64)>) -> Series {
        Series { name: name.into(), color, kind, points, annotations: Vec::new() }
    }
}

/// An axis: its label (with units) and whether it is log10.
#[derive(Clone, Debug, PartialEq)]
pub struct Axis {
    pub label: String,
    pub log: bool,
    /// Fixed bounds instead of fitting the data (e.g. 0..1 for a CDF).
    pub fixed: Option<(f64, f64)>,
    /// Whether a linear axis over non-negative data starts at 0.
    pub zero: bool,
}

impl Axis {
    pub fn linear(label: impl Into<String>) -> Axis {
        Axis { label: label.into(), log: false, fixed: None, zero: true }
    }

    /// Log10 when the positive values span two decades or more ("the data spans decades").
    pub fn auto(label: impl Into<String>, values: impl IntoIterator<Item = f64>) -> Axis {
        Axis { label: label.into(), log: spans_decades(values), fixed: None, zero: true }
    }

    pub fn with_zero(mut self, zero: bool) -> Axis {
        self.zero = zero;
        self
    }

    pub fn fixed(mut self, lo: f64, hi: f64) -> Axis {
        self.fixed = Some((lo, hi));
        self
    }
}

/// Whether the positive values span a factor of 100 or more.
pub fn spans_decades(values: impl IntoIterator<Item = f64>) -> bool {
    spans_factor(values, 100.0)
}

/// Whether the positive values span a factor of `factor` or more.
pub fn spans_factor(values: impl IntoIterator<Item = f64>, factor: f64) -> bool {
    let (mut lo, mut hi) = (f64::INFINITY, 0.0f64);
    for v in values.into_iter().filter(|v| v.is_finite() && *v > 0.0) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    hi > 0.0 && hi / lo >= factor
}

/// Where the legend goes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Legend {
    UpperLeft,
    UpperRight,
    LowerRight,
    LowerLeft,
}

/// One chart: written as `<file>.png` and `<file>.svg`.
#[derive(Clone, Debug, PartialEq)]
pub struct Chart {
    /// File stem.
    pub file: String,
    pub title: String,
    /// One line under the chart in the HTML report: what it shows and how to read it.
    pub caption: String,
    pub x: Axis,
    pub y: Axis,
    pub series: Vec<Series>,
    pub legend: Legend,
}

impl Chart {
    /// Every plotted value along x, then along y (bands include their lower edge).
    fn values(&self) -> (Vec<f64>, Vec<f64>) {
        let mut xs = Vec::new();
        let mut ys = Vec::new();
        for s in &self.series {
            for &(x, y) in &s.points {
                xs.push(x);
                ys.push(y);
            }
            match &s.kind {
                Kind::Band { lower } => ys.extend(lower.iter().copied()),
                Kind::ErrorBars { relative } => {
                    ys.extend(s.points.iter().flat_map(|&(_, y)| [y * (1.0 - relative), y * (1.0 + relative)]))
                }
                _ => {}
            }
        }
        (xs, ys)
    }
}

/// A linear or log10 axis with its ticks, as a plotters coordinate.
#[derive(Clone, Debug)]
pub struct Scale {
    lo: f64,
    hi: f64,
    log: bool,
    major: Vec<f64>,
    minor: Vec<f64>,
    /// Decimals that tell linear ticks apart.
    decimals: usize,
}

impl Scale {
    /// The scale of `axis` over `values` (non-finite values, and non-positive ones on a log axis,
    /// are ignored).
    pub fn fit(axis: &Axis, values: &[f64]) -> Scale {
        let usable = |v: &&f64| v.is_finite() && (!axis.log || **v > 0.0);
        let (mut lo, mut hi) = values
            .iter()
            .filter(usable)
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| (lo.min(v), hi.max(v)));
        if let Some((a, b)) = axis.fixed {
            (lo, hi) = (a, b);
        }
        if !lo.is_finite() {
            (lo, hi) = if axis.log { (1.0, 10.0) } else { (0.0, 1.0) };
        }
        if axis.log { Scale::log(lo, hi) } else { Scale::linear(lo, hi, axis.fixed.is_some(), axis.zero) }
    }

    fn linear(mut lo: f64, mut hi: f64, exact: bool, zero: bool) -> Scale {
        if !exact && zero && lo >= 0.0 {
            // Quantities here (throughput, latency, counts) read best against a zero baseline.
            lo = 0.0;
        }
        if hi <= lo {
            hi = if lo == 0.0 { 1.0 } else { lo + lo.abs() * 0.5 };
        }
        let raw = (hi - lo) / 6.0;
        let magnitude = 10f64.powf(raw.log10().floor());
        let step = [1.0, 2.0, 2.5, 5.0, 10.0].iter().map(|m| m * magnitude).find(|&s| s >= raw * 0.999).unwrap_or(raw);
        if !exact {
            lo = (lo / step).floor() * step;
            hi = (hi / step).ceil() * step;
        }
        let first = (lo / step).ceil() as i64;
        let last = (hi / step + 1e-9).floor() as i64;
        let major: Vec<f64> = (first..=last).map(|k| k as f64 * step).collect();
        let minor = (first - 1..=last).map(|k| (k as f64 + 0.5) * step).filter(|v| *v > lo && *v < hi).collect();
        // Enough decimals to write the step exactly: 2.5 × 10^e needs one more than 10^e.
        let e = step.log10().floor() as i32;
        let extra = i32::from((step / magnitude - 2.5).abs() < 1e-9);
        let decimals = (extra - e).max(0) as usize;
        Scale { lo, hi, log: false, major, minor, decimals }
    }

    /// A log10 axis a little wider than the data (×/÷ 1.15). Ticks at 1-2-5 × 10^k when the range
    /// is at most three decades, else at the powers of ten; the other integer multiples get grid
    /// lines only.
    fn log(lo: f64, hi: f64) -> Scale {
        let (lo, hi) = if hi > lo { (lo / 1.15, hi * 1.15) } else { (lo / 2.0, lo * 2.0) };
        let first = lo.log10().floor() as i32;
        let last = hi.log10().ceil() as i32;
        let dense = hi / lo <= 1000.0;
        let mut major = Vec::new();
        let mut minor = Vec::new();
        for e in first..=last {
            let base = 10f64.powi(e);
            for m in 1..=9 {
                let v = base * m as f64;
                if v < lo || v > hi {
                    continue;
                }
                if m == 1 || (dense && (m == 2 || m == 5)) { major.push(v) } else { minor.push(v) }
            }
        }
        Scale { lo, hi, log: true, major, minor, decimals: 0 }
    }

    /// The same scale with its top raised so that the current range fills only `1 − share` of
    /// the height.
    fn with_headroom(&self, share: f64) -> Scale {
        let keep = (1.0 - share).max(0.3);
        if self.log {
            let (a, b) = (self.lo.log10(), self.hi.log10());
            let hi = 10f64.powf(a + (b - a) / keep);
            let mut s = Scale::log(self.lo * 1.15, hi / 1.15);
            s.lo = self.lo;
            s
        } else {
            Scale::linear(self.lo, self.lo + (self.hi - self.lo) / keep, false, false)
        }
    }

    fn fraction(&self, v: f64) -> f64 {
        if self.log {
            (v.max(f64::MIN_POSITIVE).log10() - self.lo.log10()) / (self.hi.log10() - self.lo.log10())
        } else {
            (v - self.lo) / (self.hi - self.lo)
        }
    }
}

impl Ranged for Scale {
    type FormatOption = NoDefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        // Clamped a little outside the plotting area so that lines to far-off points keep their
        // direction without overflowing i32.
        let t = self.fraction(*value).clamp(-1.0, 2.0);
        limit.0 + ((limit.1 - limit.0) as f64 * t).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        match hint.weight() {
            KeyPointWeight::Bold => self.major.clone(),
            KeyPointWeight::Any => {
                let mut all: Vec<f64> = self.major.iter().chain(&self.minor).copied().collect();
                all.sort_by(f64::total_cmp);
                all
            }
        }
    }

    fn range(&self) -> Range<f64> {
        self.lo..self.hi
    }
}

impl ValueFormatter<f64> for Scale {
    fn format_ext(&self, value: &f64) -> String {
        if self.log { format_number(*value) } else { format_fixed(*value, self.decimals) }
    }
}

/// `v` with `decimals` decimals, thousands as `k` and millions as `M` when whole.
fn format_fixed(v: f64, decimals: usize) -> String {
    if v != 0.0 && v.abs() >= 10_000.0 {
        return format_number(v);
    }
    format!("{v:.decimals$}")
}

/// A compact label: `0.05`, `2.5`, `150`, `20k`, `1.5M`.
pub fn format_number(v: f64) -> String {
    let trim = |s: String| -> String {
        if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.').to_string() } else { s }
    };
    let a = v.abs();
    if a >= 1e6 {
        format!("{}M", trim(format!("{:.2}", v / 1e6)))
    } else if a >= 1e4 {
        format!("{}k", trim(format!("{:.1}", v / 1e3)))
    } else if a >= 1.0 || a == 0.0 {
        trim(format!("{v:.2}"))
    } else {
        let decimals = (-a.log10().floor()) as usize + 2;
        trim(format!("{v:.decimals$}"))
    }
}

type DrawResult<DB> = Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

/// Draws `chart` on `root` (already sized [`WIDTH_PX`] × [`HEIGHT_PX`]).
fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, chart: &Chart) -> DrawResult<DB> {
    root.fill(&WHITE)?;
    let (xs, ys) = chart.values();
    let x_scale = Scale::fit(&chart.x, &xs);
    let mut y_scale = Scale::fit(&chart.y, &ys);
    let names: Vec<&str> = chart.series.iter().map(|s| s.name.as_str()).filter(|n| !n.is_empty()).collect();
    let mut legend = chart.legend;
    let mut outside_px: Option<u32> = None;
    if !names.is_empty() {
        // The legend box as a share of the plotting area (approximately: the area is the chart
        // less margins, caption and label areas).
        let font = TextStyle::from((FONT, LEGEND_PX).into_font());
        let text_px = names.iter().map(|n| root.estimate_text_size(n, &font).map_or(0, |(w, _)| w)).max().unwrap_or(0);
        let plot_w = f64::from(WIDTH_PX - 14 - 28 - 76);
        let plot_h = f64::from(HEIGHT_PX - 2 * 14 - 52 - TITLE_PX - 12);
        let box_w_px = f64::from(text_px) + 22.0 + 36.0 + 12.0;
        let box_w = box_w_px / plot_w;
        let box_h = (names.len() as f64 * (f64::from(LEGEND_PX) + 5.0) + 14.0 + 12.0) / plot_h;
        let (best, covered) = legend_corner(chart, &x_scale, &y_scale, box_w, box_h);
        legend = best;
        if names.len() > 8 || (covered > 0 && chart.y.fixed.is_some()) {
            // A long legend, or no free corner on an axis that cannot grow: beside the plot.
            outside_px = Some(box_w_px as u32);
        } else if covered > 0 {
            // No free corner: raise the top of the y axis so the legend sits above the data.
            y_scale = y_scale.with_headroom(box_h + 0.02);
            legend = if matches!(chart.legend, Legend::UpperRight | Legend::LowerRight) { Legend::UpperRight } else { Legend::UpperLeft };
        }
    }
    let mut ctx = ChartBuilder::on(root)
        .caption(&chart.title, (FONT, TITLE_PX))
        .margin(14)
        .margin_right(28 + outside_px.map_or(0, |w| w + 4))
        .x_label_area_size(52)
        .y_label_area_size(76)
        .build_cartesian_2d(x_scale, y_scale)?;
    ctx.configure_mesh()
        .x_desc(chart.x.label.as_str())
        .y_desc(chart.y.label.as_str())
        .label_style((FONT, TICK_PX))
        .axis_desc_style((FONT, AXIS_LABEL_PX))
        .bold_line_style(RGBColor(215, 215, 215))
        .light_line_style(RGBColor(240, 240, 240))
        .x_labels(12)
        .y_labels(10)
        .draw()?;

    for s in &chart.series {
        let color = s.color;
        let legend_line = move |(x, y): (i32, i32)| PathElement::new(vec![(x, y), (x + 22, y)], color.stroke_width(3));
        let points = s.points.clone();
        let anno = match &s.kind {
            Kind::Line => ctx.draw_series(LineSeries::new(points, color.stroke_width(2)))?,
            Kind::Dashed => ctx.draw_series(DashedLineSeries::new(points, 8, 5, color.stroke_width(2)))?,
            Kind::LineMarkers => {
                ctx.draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?;
                ctx.draw_series(points.into_iter().map(|p| Circle::new(p, 4, color.filled())))?
            }
            Kind::DashedMarkers => {
                ctx.draw_series(DashedLineSeries::new(points.clone(), 8, 5, color.stroke_width(2)))?;
                ctx.draw_series(points.into_iter().map(|p| TriangleMarker::new(p, 5, color.filled())))?
            }
            Kind::ErrorBars { relative } => {
                let r = *relative;
                ctx.draw_series(points.iter().map(|&(x, y)| {
                    PathElement::new(vec![(x, y * (1.0 - r)), (x, y * (1.0 + r))], color.stroke_width(2))
                }))?;
                for bound in [1.0 - r, 1.0 + r] {
                    ctx.draw_series(points.iter().map(|&(x, y)| {
                        EmptyElement::at((x, y * bound)) + PathElement::new(vec![(-5, 0), (5, 0)], color.stroke_width(2))
                    }))?;
                }
                ctx.draw_series(points.into_iter().map(|p| Circle::new(p, 6, color.stroke_width(2))))?
            }
            Kind::Markers => ctx.draw_series(points.into_iter().map(|p| Circle::new(p, 5, color.stroke_width(2))))?,
            Kind::Band { lower } => {
                let mut outline = points.clone();
                outline.extend(points.iter().zip(lower).rev().map(|(&(x, _), &y)| (x, y)));
                ctx.draw_series(std::iter::once(Polygon::new(outline, color.mix(0.55).filled())))?
            }
        };
        if !s.name.is_empty() {
            match &s.kind {
                Kind::Band { .. } => {
                    anno.label(s.name.as_str())
                        .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 22, y + 6)], color.mix(0.55).filled()));
                }
                Kind::ErrorBars { .. } | Kind::Markers => {
                    anno.label(s.name.as_str()).legend(move |(x, y)| Circle::new((x + 11, y), 6, color.stroke_width(2)));
                }
                Kind::LineMarkers => {
                    anno.label(s.name.as_str()).legend(move |(x, y)| {
                        EmptyElement::at((x, y))
                            + PathElement::new(vec![(0, 0), (22, 0)], color.stroke_width(2))
                            + Circle::new((11, 0), 4, color.filled())
                    });
                }
                Kind::DashedMarkers => {
                    anno.label(s.name.as_str()).legend(move |(x, y)| {
                        EmptyElement::at((x, y))
                            + PathElement::new(vec![(0, 0), (6, 0)], color.stroke_width(2))
                            + PathElement::new(vec![(16, 0), (22, 0)], color.stroke_width(2))
                            + TriangleMarker::new((11, 0), 5, color.filled())
                    });
                }
                Kind::Line | Kind::Dashed => {
                    anno.label(s.name.as_str()).legend(legend_line);
                }
            }
        }
        if !s.annotations.is_empty() {
            // Labels that would overlap one already placed are left out (crowded low-load points).
            let (w, h) = ctx.plotting_area().dim_in_pixel();
            let font = (FONT, ANNOTATION_PX).into_font();
            let mut placed: Vec<(f64, f64, f64)> = Vec::new();
            let mut labels = Vec::new();
            for (&(x, y), text) in s.points.iter().zip(&s.annotations) {
                let px = ctx.as_coord_spec().x_spec().fraction(x) * f64::from(w);
                let py = (1.0 - ctx.as_coord_spec().y_spec().fraction(y)) * f64::from(h);
                let width = f64::from(root.estimate_text_size(text, &TextStyle::from(font.clone())).map_or(0, |(tw, _)| tw));
                let clear = placed.iter().all(|&(qx, qy, qw)| {
                    let overlap_x = px < qx + qw + 4.0 && qx < px + width + 4.0;
                    !overlap_x || (py - qy).abs() >= f64::from(ANNOTATION_PX) + 2.0
                });
                if clear {
                    placed.push((px, py, width));
                    labels.push(((x, y), text.clone()));
                }
            }
            ctx.draw_series(labels.into_iter().map(|(p, text)| {
                EmptyElement::at(p) + Text::new(text, (7, -17), font.clone().color(&color))
            }))?;
        }
    }

    if outside_px.is_some() {
        // plotters clips its legend to the plotting area, so a legend beside it is drawn here.
        let (xr, yr) = ctx.plotting_area().get_pixel_range();
        let (x0, mut y) = (xr.end + 12, yr.start + 10);
        let font = (FONT, LEGEND_PX).into_font();
        for s in chart.series.iter().filter(|s| !s.name.is_empty()) {
            draw_glyph(root, &s.kind, s.color, (x0, y))?;
            root.draw(&Text::new(s.name.clone(), (x0 + 30, y - LEGEND_PX as i32 / 2 - 1), font.clone()))?;
            y += LEGEND_PX as i32 + 5;
        }
    } else if chart.series.iter().any(|s| !s.name.is_empty()) {
        let position = match legend {
            Legend::UpperLeft => SeriesLabelPosition::UpperLeft,
            Legend::UpperRight => SeriesLabelPosition::UpperRight,
            Legend::LowerRight => SeriesLabelPosition::LowerRight,
            Legend::LowerLeft => SeriesLabelPosition::LowerLeft,
        };
        ctx.configure_series_labels()
            .position(position)
            .margin(if outside_px.is_some() { 6 } else { 12 })
            .label_font((FONT, LEGEND_PX))
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(160, 160, 160))
            .draw()?;
    }
    root.present()?;
    Ok(())
}

/// A legend sample of a series of `kind`, 22 px wide, centred vertically on `(x, y)`.
fn draw_glyph<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, kind: &Kind, color: RGBColor, (x, y): (i32, i32)) -> DrawResult<DB> {
    let line = |a: i32, b: i32| PathElement::new(vec![(x + a, y), (x + b, y)], color.stroke_width(2));
    match kind {
        Kind::Line | Kind::Dashed => root.draw(&PathElement::new(vec![(x, y), (x + 22, y)], color.stroke_width(3))),
        Kind::LineMarkers => {
            root.draw(&line(0, 22))?;
            root.draw(&Circle::new((x + 11, y), 4, color.filled()))
        }
        Kind::DashedMarkers => {
            root.draw(&line(0, 6))?;
            root.draw(&line(16, 22))?;
            root.draw(&TriangleMarker::new((x + 11, y), 5, color.filled()))
        }
        Kind::ErrorBars { .. } | Kind::Markers => root.draw(&Circle::new((x + 11, y), 6, color.stroke_width(2))),
        Kind::Band { .. } => root.draw(&Rectangle::new([(x, y - 6), (x + 22, y + 6)], color.mix(0.55).filled())),
    }
}

/// The corner whose legend box covers the fewest data points (sampled along lines too), trying
/// the chart's preferred corner first; and how many points it covers.
fn legend_corner(chart: &Chart, x: &Scale, y: &Scale, box_w: f64, box_h: f64) -> (Legend, usize) {
    let mut samples: Vec<(f64, f64)> = Vec::new();
    for s in &chart.series {
        let frac: Vec<(f64, f64)> = s.points.iter().map(|&(px, py)| (x.fraction(px), y.fraction(py))).collect();
        samples.extend(&frac);
        if matches!(s.kind, Kind::Line | Kind::LineMarkers | Kind::Dashed | Kind::DashedMarkers | Kind::Band { .. }) {
            for w in frac.windows(2) {
                for k in 1..8 {
                    let t = f64::from(k) / 8.0;
                    samples.push((w[0].0 + (w[1].0 - w[0].0) * t, w[0].1 + (w[1].1 - w[0].1) * t));
                }
            }
        }
        if let Kind::Band { lower } = &s.kind {
            samples.extend(s.points.iter().zip(lower).map(|(&(px, _), &ly)| (x.fraction(px), y.fraction(ly))));
        }
    }
    let covered = |corner: Legend| {
        let (left, bottom) = match corner {
            Legend::UpperLeft => (true, false),
            Legend::UpperRight => (false, false),
            Legend::LowerLeft => (true, true),
            Legend::LowerRight => (false, true),
        };
        samples
            .iter()
            .filter(|&&(fx, fy)| {
                let in_x = if left { fx <= box_w } else { fx >= 1.0 - box_w };
                let in_y = if bottom { fy <= box_h } else { fy >= 1.0 - box_h };
                in_x && in_y
            })
            .count()
    };
    let mut corners = vec![chart.legend];
    corners.extend([Legend::UpperLeft, Legend::UpperRight, Legend::LowerRight, Legend::LowerLeft].into_iter().filter(|c| *c != chart.legend));
    let mut best = (chart.legend, usize::MAX);
    for corner in corners {
        let n = covered(corner);
        if n < best.1 {
            best = (corner, n);
        }
    }
    best
}

/// The chart as an SVG document.
pub fn render_svg(chart: &Chart) -> Result<String, String> {
    register_bundled_font();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH_PX, HEIGHT_PX)).into_drawing_area();
        draw(&root, chart).map_err(|e| format!("{}: drawing the SVG failed: {e}", chart.file))?;
    }
    if !svg.ends_with('\n') {
        svg.push('\n');
    }
    Ok(svg)
}

/// The chart as a PNG file's bytes (8-bit RGB).
pub fn render_png(chart: &Chart) -> Result<Vec<u8>, String> {
    register_bundled_font();
    let mut rgb = vec![0u8; (WIDTH_PX * HEIGHT_PX * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, (WIDTH_PX, HEIGHT_PX)).into_drawing_area();
        draw(&root, chart).map_err(|e| format!("{}: drawing the PNG failed: {e}", chart.file))?;
    }
    encode_png(&rgb, WIDTH_PX, HEIGHT_PX).map_err(|e| format!("{}: encoding the PNG failed: {e}", chart.file))
}

/// 8-bit RGB pixels → PNG bytes. Deterministic: no timestamp or other ancillary chunk.
pub fn encode_png(rgb: &[u8], width: u32, height: u32) -> Result<Vec<u8>, png::EncodingError> {
    let mut out = Vec::new();
    {
        let mut encoder = png::Encoder::new(&mut out, width, height);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        encoder.set_compression(png::Compression::Best);
        let mut writer = encoder.write_header()?;
        writer.write_image_data(rgb)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_ticks_are_round() {
        let s = Scale::linear(0.0, 13.7, false, true);
        assert_eq!(s.major, vec![0.0, 2.5, 5.0, 7.5, 10.0, 12.5, 15.0]);
        assert_eq!(s.format_ext(&2.5), "2.5");
        let s = Scale::linear(3.0, 1234.0, false, true);
        assert_eq!((s.lo, s.hi), (0.0, 1250.0));
        assert_eq!(s.format_ext(&200.0), "200");
    }

    #[test]
    fn log_ticks_are_decades_or_one_two_five() {
        let s = Scale::log(1.0, 2048.0);
        assert_eq!(s.major, vec![1.0, 10.0, 100.0, 1000.0]);
        let s = Scale::log(0.5, 9.0);
        assert_eq!(s.major, vec![0.5, 1.0, 2.0, 5.0, 10.0]);
        assert!(s.lo < 0.5 && s.hi > 9.0);
    }

    #[test]
    fn numbers_are_compact() {
        assert_eq!(format_number(20_000.0), "20k");
        assert_eq!(format_number(1_500_000.0), "1.5M");
        assert_eq!(format_number(0.05), "0.05");
        assert_eq!(format_number(150.0), "150");
        assert!(spans_decades([1.0, 2048.0]));
        assert!(!spans_decades([200.0, 1000.0]));
    }

    #[test]
    fn ramp_runs_from_purple_to_green() {
        assert_eq!(ramp(0, 5), RGBColor(68, 1, 84));
        assert_eq!(ramp(4, 5), RGBColor(144, 215, 67));
        assert_eq!(ramp(0, 1), RGBColor(68, 1, 84));
    }
}

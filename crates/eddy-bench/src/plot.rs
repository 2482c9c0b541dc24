//! Plots: per-phase comparison of runs (horizontal bars, log scale, one panel for bandwidth
//! phases in MiB/s and one for the others in kIOPS) and throughput against process count.
//! The output format follows the file extension: `.svg` or `.png`.
//!
//! Text needs a TrueType font (eddy-plot: `EDDY_BENCH_FONT`, else DejaVu Sans or Liberation
//! Sans).

use crate::plan::{Kind, Phase};
use crate::report::{ratio, Report};
use anyhow::{anyhow, bail, Context};
use eddy_plot::{bar_color, ensure_font, line_color, FONT};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

const WIDTH: u32 = 1100;
const ROW_HEIGHT: u32 = 34;
const PANEL_EXTRA: u32 = 110;

fn plot_err<E: std::fmt::Display>(e: E) -> anyhow::Error {
    anyhow!("drawing failed: {e}")
}

enum Format {
    Svg,
    Png,
}

fn format_of(path: &Path) -> anyhow::Result<Format> {
    match path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        Some("svg") => Ok(Format::Svg),
        Some("png") => Ok(Format::Png),
        _ => bail!("{}: the plot file must end in .svg or .png", path.display()),
    }
}

/// Renders `draw` to `path` at the given size, in the format the extension names.
fn render(
    path: &Path,
    size: (u32, u32),
    draw: impl Fn(&DrawingArea<SVGBackend, Shift>) -> anyhow::Result<()>,
    draw_png: impl Fn(&DrawingArea<BitMapBackend, Shift>) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    ensure_font().map_err(|e| anyhow!(e))?;
    match format_of(path)? {
        Format::Svg => {
            let root = SVGBackend::new(path, size).into_drawing_area();
            draw(&root)?;
            root.present().map_err(plot_err)
        }
        Format::Png => {
            let root = BitMapBackend::new(path, size).into_drawing_area();
            draw_png(&root)?;
            root.present().map_err(plot_err)
        }
    }
    .with_context(|| format!("cannot write the plot {}", path.display()))
}

/// Phases present in the first run, split into (bandwidth, other) panels.
fn panels(runs: &[Report]) -> (Vec<Phase>, Vec<Phase>) {
    let phases: Vec<Phase> = runs
        .first()
        .map(|r| r.phases.iter().map(|p| p.phase).collect())
        .unwrap_or_default();
    let bw = phases
        .iter()
        .copied()
        .filter(|p| p.kind() == Kind::Bw)
        .collect();
    let other = phases
        .iter()
        .copied()
        .filter(|p| p.kind() != Kind::Bw)
        .collect();
    (bw, other)
}

fn value(run: &Report, phase: Phase) -> Option<f64> {
    run.phases
        .iter()
        .find(|p| p.phase == phase)
        .map(|p| p.primary())
        .filter(|v| *v > 0.0)
}

/// Per-phase comparison of one or more runs.
pub fn plot_runs(runs: &[Report], path: &Path, title: &str) -> anyhow::Result<()> {
    if runs.is_empty() {
        bail!("nothing to plot");
    }
    let (bw, other) = panels(runs);
    let rows = |n: usize| n.max(1) as u32 * ROW_HEIGHT * runs.len().max(2) as u32 / 2 + PANEL_EXTRA;
    let height = 60 + rows(bw.len()) + rows(other.len());
    let split = 60 + rows(bw.len()) - 40;
    let panels = (bw.as_slice(), other.as_slice());
    render(
        path,
        (WIDTH, height),
        |r| draw_runs(r, runs, title, split, panels),
        |r| draw_runs(r, runs, title, split, panels),
    )
}

fn draw_runs<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    runs: &[Report],
    title: &str,
    split: u32,
    (bw, other): (&[Phase], &[Phase]),
) -> anyhow::Result<()> {
    root.fill(&WHITE).map_err(plot_err)?;
    let root = root.titled(title, (FONT, 24)).map_err(plot_err)?;
    let (top, bottom) = root.split_vertically(split);
    bars(&top, runs, bw, "bandwidth phases (MiB/s, log scale)")?;
    bars(
        &bottom,
        runs,
        other,
        "metadata and IOPS phases (kIOPS, log scale)",
    )
}

/// Every value the runs report for the phases, to scale an axis.
fn all_values(runs: &[Report], phases: &[Phase]) -> Vec<f64> {
    runs.iter()
        .flat_map(|r| phases.iter().filter_map(|p| value(r, *p)))
        .collect()
}

fn bars<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    runs: &[Report],
    phases: &[Phase],
    caption: &str,
) -> anyhow::Result<()> {
    if phases.is_empty() {
        return Ok(());
    }
    let values = all_values(runs, phases);
    let (lo, hi) = bounds(&values, 6.0);
    let k = phases.len();
    let names: Vec<&str> = phases.iter().map(|p| p.name()).collect();
    let label = |y: &f64| {
        let i = y.round();
        if (y - i).abs() < 1e-6 && i >= 0.0 {
            names
                .get(k - 1 - i as usize)
                .map(|s| s.to_string())
                .unwrap_or_default()
        } else {
            String::new()
        }
    };
    let mut chart = ChartBuilder::on(area)
        .caption(caption, (FONT, 18))
        .margin(12)
        .margin_right(40)
        .x_label_area_size(34)
        .y_label_area_size(170)
        .build_cartesian_2d((lo..hi).log_scale(), -0.5f64..(k as f64 - 0.5))
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(k * 4 + 1)
        .y_label_formatter(&label)
        .label_style((FONT, 14))
        .draw()
        .map_err(plot_err)?;
    let n = runs.len() as f64;
    let band = 0.8 / n;
    for (ri, run) in runs.iter().enumerate() {
        let c = bar_color(ri);
        let rects = phases.iter().enumerate().filter_map(|(pi, p)| {
            let v = value(run, *p)?;
            let y0 = (k - 1 - pi) as f64 + 0.4 - band * (ri as f64 + 1.0);
            Some(Rectangle::new([(lo, y0), (v, y0 + band * 0.9)], c.filled()))
        });
        chart
            .draw_series(rects)
            .map_err(plot_err)?
            .label(run.label.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], c.filled()));
    }
    if runs.len() >= 2 {
        // Each run's ratio to the first, beside the longest bar of the phase.
        let notes = phases.iter().enumerate().filter_map(|(pi, p)| {
            let a = value(&runs[0], *p)?;
            let vals: Vec<f64> = runs[1..].iter().filter_map(|r| value(r, *p)).collect();
            let text: Vec<String> = vals
                .iter()
                .filter_map(|&b| Some(format!("{}×", ratio_text(ratio(a, b)?))))
                .collect();
            if text.is_empty() {
                return None;
            }
            let right = vals.iter().copied().fold(a, f64::max);
            let y = (k - 1 - pi) as f64;
            Some(Text::new(
                text.join(" / "),
                (right * 1.15, y + 0.1),
                (FONT, 14),
            ))
        });
        chart.draw_series(notes).map_err(plot_err)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font((FONT, 14))
        .draw()
        .map_err(plot_err)
}

/// Log-axis bounds: half the smallest value to `headroom` times the largest.
fn bounds(values: &[f64], headroom: f64) -> (f64, f64) {
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(0.0, f64::max);
    if !(min.is_finite() && min > 0.0) {
        return (0.1, 10.0);
    }
    let lo = min / 2.0;
    (lo, (max * headroom).max(lo * 10.0))
}

/// A ratio with about three significant digits.
fn ratio_text(r: f64) -> String {
    match r {
        r if r >= 10.0 => format!("{r:.0}"),
        r if r >= 1.0 => format!("{r:.2}"),
        r if r >= 0.01 => format!("{r:.3}"),
        r => format!("{r:.1e}"),
    }
}

/// Throughput against process count: one line per phase, runs ordered by procs.
pub fn plot_scale(runs: &[Report], path: &Path, title: &str) -> anyhow::Result<()> {
    if runs.is_empty() {
        bail!("nothing to plot");
    }
    let (bw, other) = panels(runs);
    let panels = (bw.as_slice(), other.as_slice());
    render(
        path,
        (WIDTH, 620),
        |r| draw_scale(r, runs, title, panels),
        |r| draw_scale(r, runs, title, panels),
    )
}

fn draw_scale<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    runs: &[Report],
    title: &str,
    (bw, other): (&[Phase], &[Phase]),
) -> anyhow::Result<()> {
    root.fill(&WHITE).map_err(plot_err)?;
    let root = root.titled(title, (FONT, 24)).map_err(plot_err)?;
    let (left, right) = root.split_horizontally(WIDTH / 2);
    lines(&left, runs, bw, "bandwidth (MiB/s)")?;
    lines(&right, runs, other, "metadata and IOPS (kIOPS)")
}

fn lines<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    runs: &[Report],
    phases: &[Phase],
    caption: &str,
) -> anyhow::Result<()> {
    if phases.is_empty() {
        return Ok(());
    }
    let values = all_values(runs, phases);
    let (lo, hi) = bounds(&values, 2.0);
    let pmax = runs.iter().map(|r| r.procs).max().unwrap_or(1).max(2);
    let mut chart = ChartBuilder::on(area)
        .caption(caption, (FONT, 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(1u32..pmax, (lo..hi).log_scale())
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .x_desc("processes")
        .label_style((FONT, 14))
        .draw()
        .map_err(plot_err)?;
    for (i, p) in phases.iter().enumerate() {
        let c = line_color(i);
        let pts: Vec<(u32, f64)> = runs
            .iter()
            .filter_map(|r| Some((r.procs, value(r, *p)?)))
            .collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
            .map_err(plot_err)?
            .label(p.name())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2)));
        chart
            .draw_series(pts.into_iter().map(|pt| Circle::new(pt, 4, c.filled())))
            .map_err(plot_err)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font((FONT, 13))
        .draw()
        .map_err(plot_err)
}

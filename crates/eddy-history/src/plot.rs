//! A job profile as a picture (`eddy history plot JOB --out F.png`): read and write bandwidth
//! per daemon over time, IOPS per daemon, metadata operations per daemon, the request-size
//! histogram and a summary of the figures DFRA decides by, in one image, in the style of
//! `eddy bench`'s plots (crates/eddy-bench/src/plot.rs). PNG, or SVG for a `.svg` path.
//!
//! Text needs a TrueType font, found as `eddy bench` finds it (eddy-plot).

use crate::db::mode_name;
use crate::profile::{JobProfile, SeriesPoint};
use eddy_plot::{ensure_font, line_color, FONT};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::{Path, PathBuf};

const WIDTH: u32 = 1200;
const HEIGHT: u32 = 1100;
const MIB: f64 = 1024.0 * 1024.0;

/// Errors drawing a plot.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    #[error("{0}")]
    Font(String),
    #[error("{}: the plot file must end in .png or .svg", .0.display())]
    Format(PathBuf),
    #[error("cannot write the plot {}: {message}", path.display())]
    Draw { path: PathBuf, message: String },
}

type DrawResult = Result<(), String>;

fn de<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

/// Writes the plot of `profile` to `path` (`.png` or `.svg`).
pub fn plot_profile(profile: &JobProfile, path: &Path) -> Result<(), PlotError> {
    ensure_font().map_err(PlotError::Font)?;
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    let drawn = match ext.as_deref() {
        Some("png") => {
            let root = BitMapBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
            draw(&root, profile).and_then(|()| root.present().map_err(de))
        }
        Some("svg") => {
            let root = SVGBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
            draw(&root, profile).and_then(|()| root.present().map_err(de))
        }
        _ => return Err(PlotError::Format(path.to_path_buf())),
    };
    drawn.map_err(|message| PlotError::Draw {
        path: path.to_path_buf(),
        message,
    })
}

/// The plot's title: the job and what it was.
fn title(p: &JobProfile) -> String {
    let name = p.job_name.as_deref().unwrap_or("-");
    format!("job {} ({name}, {}): I/O profile", p.key, p.user)
}

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, p: &JobProfile) -> DrawResult {
    root.fill(&WHITE).map_err(de)?;
    let root = root.titled(&title(p), (FONT, 24)).map_err(de)?;
    let rows = root.split_evenly((3, 2));
    let daemons = daemons_of(&p.series);
    series_panel(
        &rows[0],
        p,
        &daemons,
        "read bandwidth per daemon (MiB/s)",
        |s| s.read_bps / MIB,
    )?;
    series_panel(
        &rows[1],
        p,
        &daemons,
        "write bandwidth per daemon (MiB/s)",
        |s| s.write_bps / MIB,
    )?;
    series_panel(&rows[2], p, &daemons, "IOPS per daemon", |s| s.iops)?;
    series_panel(
        &rows[3],
        p,
        &daemons,
        "metadata operations per daemon (/s)",
        |s| s.metadata_ops_per_s,
    )?;
    sizes_panel(&rows[4], &p.request_sizes)?;
    summary_panel(&rows[5], p)
}

/// The daemons present in the series, in order.
fn daemons_of(series: &[SeriesPoint]) -> Vec<u32> {
    let mut d: Vec<u32> = series.iter().map(|s| s.daemon).collect();
    d.sort_unstable();
    d.dedup();
    d
}

/// A panel with nothing to show says so.
fn empty<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    caption: &str,
    why: &str,
) -> DrawResult {
    let area = area.titled(caption, (FONT, 18)).map_err(de)?;
    let (w, h) = area.dim_in_pixel();
    area.draw(&Text::new(
        why.to_string(),
        (
            i32::try_from(w / 3).unwrap_or(0),
            i32::try_from(h / 2).unwrap_or(0),
        ),
        (FONT, 16).into_font().color(&RGBColor(0x60, 0x60, 0x60)),
    ))
    .map_err(de)
}

/// One value of the time series over time, a line per daemon.
fn series_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    p: &JobProfile,
    daemons: &[u32],
    caption: &str,
    value: impl Fn(&SeriesPoint) -> f64,
) -> DrawResult {
    if p.series.is_empty() {
        return empty(area, caption, "no time series in this profile");
    }
    let t_end = p
        .series
        .iter()
        .map(|s| s.t + s.seconds)
        .fold(p.seconds(), f64::max)
        .max(1.0);
    let top = p
        .series
        .iter()
        .map(&value)
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    let top = if top > 0.0 { top * 1.15 } else { 1.0 };
    let mut chart = ChartBuilder::on(area)
        .caption(caption, (FONT, 18))
        .margin(10)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .build_cartesian_2d(0.0..t_end, 0.0..top)
        .map_err(de)?;
    chart
        .configure_mesh()
        .x_desc("seconds from the job's start")
        .label_style((FONT, 13))
        .draw()
        .map_err(de)?;
    for (i, &d) in daemons.iter().enumerate() {
        let c = line_color(i);
        let mut pts: Vec<(f64, f64)> = p
            .series
            .iter()
            .filter(|s| s.daemon == d)
            .map(|s| (s.t + s.seconds / 2.0, value(s)))
            .filter(|(_, v)| v.is_finite())
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let host = p
            .daemons
            .iter()
            .find(|l| l.daemon == d)
            .map(|l| format!("daemon {d} ({})", l.host))
            .unwrap_or_else(|| format!("daemon {d}"));
        chart
            .draw_series(LineSeries::new(pts, c.stroke_width(2)))
            .map_err(de)?
            .label(host)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font((FONT, 12))
        .draw()
        .map_err(de)
}

/// A power-of-two size as text: 4K, 1M, 2G.
fn size_label(bucket: usize) -> String {
    let units = ["", "K", "M", "G", "T"];
    let unit = (bucket / 10).min(units.len() - 1);
    format!("{}{}", 1u64 << (bucket - unit * 10).min(63), units[unit])
}

/// Requests per power-of-two size bucket, as bars.
fn sizes_panel<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, sizes: &[u64]) -> DrawResult {
    let caption = "request sizes (requests per power-of-two size)";
    let used: Vec<usize> = (0..sizes.len()).filter(|&i| sizes[i] > 0).collect();
    let (Some(&first), Some(&last)) = (used.first(), used.last()) else {
        return empty(area, caption, "no requests counted");
    };
    let top = sizes.iter().copied().max().unwrap_or(1) as f64 * 1.15;
    let lo = first as f64 - 0.5;
    let hi = last as f64 + 0.5;
    let label = |x: &f64| {
        let i = x.round();
        if (x - i).abs() < 1e-6 && i >= 0.0 {
            size_label(i as usize)
        } else {
            String::new()
        }
    };
    let mut chart = ChartBuilder::on(area)
        .caption(caption, (FONT, 18))
        .margin(10)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .build_cartesian_2d(lo..hi, 0.0..top)
        .map_err(de)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels((last - first + 1) * 2 + 1)
        .x_label_formatter(&label)
        .label_style((FONT, 13))
        .draw()
        .map_err(de)?;
    let c = line_color(0);
    chart
        .draw_series((first..=last).filter(|&i| sizes[i] > 0).map(|i| {
            let x = i as f64;
            Rectangle::new([(x - 0.35, 0.0), (x + 0.35, sizes[i] as f64)], c.filled())
        }))
        .map_err(de)?;
    Ok(())
}

/// Bytes with a binary unit.
pub fn human_bytes(b: f64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = b;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{v:.0} {}", units[u])
    } else {
        format!("{v:.1} {}", units[u])
    }
}

/// The figures the allocation decides by, as text.
fn summary_panel<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, p: &JobProfile) -> DrawResult {
    let area = area.titled("summary", (FONT, 18)).map_err(de)?;
    let lines = [
        format!(
            "volume: {} read, {} written",
            human_bytes(p.read_bytes as f64),
            human_bytes(p.written_bytes as f64)
        ),
        format!("duration: {:.1} s", p.seconds()),
        format!(
            "I/O mode: {}   files: {} ({} shared)",
            mode_name(p.io_mode),
            p.files,
            p.shared_files
        ),
        format!(
            "nodes that did I/O (N_A): {}   processes: {}",
            p.io_nodes.map_or("unknown".into(), |n| n.to_string()),
            p.io_processes
        ),
        format!(
            "bandwidth: peak {}/s, mean {}/s",
            human_bytes(p.peak_bandwidth),
            human_bytes(p.mean_bandwidth)
        ),
        format!(
            "per node (B_c): peak {}/s, mean {}/s",
            human_bytes(p.peak_node_bandwidth),
            human_bytes(p.mean_node_bandwidth)
        ),
        format!("IOPS: peak {:.0}, mean {:.0}", p.peak_iops, p.mean_iops),
        format!(
            "metadata: peak {:.0}/s, mean {:.1}/s, queue {}",
            p.peak_metadata_rate,
            p.mean_metadata_rate,
            p.mean_metadata_queue
                .map_or("unknown".into(), |q| format!("{q:.2}"))
        ),
    ];
    for (i, line) in lines.iter().enumerate() {
        let y = 16 + 30 * i32::try_from(i).unwrap_or(0);
        area.draw(&Text::new(line.clone(), (24, y), (FONT, 16)))
            .map_err(de)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use eddy_testkit::profiles::{profile, Run};

    /// The pixels of a PNG and how many distinct colours it has.
    fn decode(path: &Path) -> (u32, u32, usize) {
        let img = image::open(path).unwrap().to_rgb8();
        let mut colours: Vec<[u8; 3]> = img.pixels().map(|p| p.0).collect();
        colours.sort_unstable();
        colours.dedup();
        (img.width(), img.height(), colours.len())
    }

    #[test]
    fn a_profile_makes_a_png_with_every_panel() {
        let p: JobProfile = serde_json::from_value(profile(&Run {
            key: "4242",
            job_id: Some("4242"),
            job_name: "wrf",
            user: "alice",
            script_hash: "h",
            start: 1_790_000_000.0,
            seconds: 90,
            nodes: 8,
            bytes_per_node: 1 << 30,
            mode: "N-1",
        }))
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("job.png");
        plot_profile(&p, &out).unwrap();
        let (w, h, colours) = decode(&out);
        assert_eq!((w, h), (WIDTH, HEIGHT));
        // Lines of three daemons, bars, text: far more than a blank or one-colour image.
        assert!(colours > 50, "{colours} colours");
        // Every daemon's colour is drawn.
        let img = image::open(&out).unwrap().to_rgb8();
        for i in 0..3 {
            let c = line_color(i).rgb();
            assert!(img.pixels().any(|px| px.0 == [c.0, c.1, c.2]), "daemon {i}");
        }
    }

    #[test]
    fn a_profile_without_series_still_plots() {
        let mut p: JobProfile = serde_json::from_value(profile(&Run {
            key: "k",
            job_id: None,
            job_name: "x",
            user: "u",
            script_hash: "h",
            start: 0.0,
            seconds: 10,
            nodes: 1,
            bytes_per_node: 1 << 20,
            mode: "1-1",
        }))
        .unwrap();
        p.series.clear();
        p.request_sizes.clear();
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("empty.png");
        plot_profile(&p, &out).unwrap();
        assert_eq!(decode(&out).0, WIDTH);
        let bad = plot_profile(&p, &dir.path().join("x.jpg")).unwrap_err();
        assert!(bad.to_string().contains(".png or .svg"), "{bad}");
    }
}

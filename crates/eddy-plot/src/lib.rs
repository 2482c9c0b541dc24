//! eddy-plot: what Eddy's plots share (`eddy bench`'s comparisons, `eddy history plot`'s job
//! profiles): the TrueType font text is drawn with, found and registered once per process,
//! and the palettes, so that every picture Eddy draws looks the same.
//!
//! The font: `EDDY_BENCH_FONT` (a .ttf file), else DejaVu Sans (Debian/Ubuntu package
//! `fonts-dejavu-core`) or Liberation Sans at their usual paths.

#![forbid(unsafe_code)]

use plotters::style::{FontStyle, RGBColor};
use std::path::PathBuf;
use std::sync::OnceLock;

/// The family name text is drawn with (`(FONT, size)`), once `ensure_font` succeeded.
pub const FONT: &str = "sans-serif";

const FONT_CANDIDATES: [&str; 5] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
];

/// Finds a TrueType font and registers it as `FONT` (normal and bold), once per process;
/// the error says how to get one.
pub fn ensure_font() -> Result<(), String> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        let mut candidates: Vec<PathBuf> = Vec::new();
        if let Some(p) = std::env::var_os("EDDY_BENCH_FONT") {
            candidates.push(p.into());
        }
        candidates.extend(FONT_CANDIDATES.iter().map(PathBuf::from));
        let Some((path, bytes)) = candidates
            .iter()
            .find_map(|p| Some((p, std::fs::read(p).ok()?)))
        else {
            return Err(
                "no TrueType font found for the plot: install the package fonts-dejavu-core \
                 (apt-get install fonts-dejavu-core) or set EDDY_BENCH_FONT to a .ttf file"
                    .to_string(),
            );
        };
        // Registered fonts live as long as the process.
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        for style in [FontStyle::Normal, FontStyle::Bold] {
            plotters::style::register_font(FONT, style, bytes)
                .map_err(|_| format!("{} is not a usable TrueType font", path.display()))?;
        }
        Ok(())
    })
    .clone()
}

/// Soft colours for bars, one per run.
pub fn bar_color(i: usize) -> RGBColor {
    const COLORS: [RGBColor; 6] = [
        RGBColor(0x4c, 0x72, 0xb0),
        RGBColor(0xdd, 0x84, 0x52),
        RGBColor(0x55, 0xa8, 0x68),
        RGBColor(0xc4, 0x4e, 0x52),
        RGBColor(0x81, 0x72, 0xb3),
        RGBColor(0x93, 0x78, 0x60),
    ];
    COLORS[i % COLORS.len()]
}

/// Distinct, dark enough colours for up to 15 lines on white.
pub fn line_color(i: usize) -> RGBColor {
    const COLORS: [RGBColor; 15] = [
        RGBColor(0x1f, 0x77, 0xb4),
        RGBColor(0xd6, 0x27, 0x28),
        RGBColor(0x2c, 0xa0, 0x2c),
        RGBColor(0xff, 0x7f, 0x0e),
        RGBColor(0x94, 0x67, 0xbd),
        RGBColor(0x8c, 0x56, 0x4b),
        RGBColor(0xe3, 0x77, 0xc2),
        RGBColor(0x7f, 0x7f, 0x7f),
        RGBColor(0xbc, 0xbd, 0x22),
        RGBColor(0x17, 0xbe, 0xcf),
        RGBColor(0x39, 0x3b, 0x79),
        RGBColor(0x63, 0x79, 0x39),
        RGBColor(0x8c, 0x6d, 0x31),
        RGBColor(0x84, 0x3c, 0x39),
        RGBColor(0x7b, 0x41, 0x73),
    ];
    COLORS[i % COLORS.len()]
}

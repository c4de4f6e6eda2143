//! The plots for docs/benchmarks.md, drawn with `plotters` into SVG files: handoff latency
//! against the number of waiters, and throughput, per library.

use std::path::Path;

use plotters::prelude::*;

use crate::peers::Result;

/// One line per library: its label and (waiters, p50 in ms) points.
pub(crate) type Series = Vec<(String, Vec<(usize, f64)>)>;

/// Line colours, one per library in table order.
const COLOURS: [RGBColor; 4] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
];

const SIZE: (u32, u32) = (900, 420);

/// Handoff p50 against waiters, one panel per topology (`panels`: title and series),
/// log-scaled on both axes.
pub(crate) fn handoff(path: &Path, title: &str, panels: &[(String, Series)]) -> Result<()> {
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 20))?;
    let areas = root.split_evenly((1, panels.len().max(1)));
    let max_waiters = panels
        .iter()
        .flat_map(|(_, s)| s.iter().flat_map(|(_, pts)| pts.iter().map(|p| p.0)))
        .max()
        .unwrap_or(1) as f64;
    // A decade of headroom above the lines for the legend.
    let (lo, hi) = bounds(
        panels
            .iter()
            .flat_map(|(_, s)| s.iter().flat_map(|(_, pts)| pts.iter().map(|p| p.1))),
    );
    let hi = hi * 10.0;
    for ((caption, series), area) in panels.iter().zip(areas.iter()) {
        let mut chart = ChartBuilder::on(area)
            .caption(caption, ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(36)
            .y_label_area_size(56)
            .build_cartesian_2d(
                (0.8f64..max_waiters * 1.25).log_scale(),
                (lo..hi).log_scale(),
            )?;
        chart
            .configure_mesh()
            .x_desc("waiters")
            .y_desc("handoff p50 (ms)")
            .y_labels(6)
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| format!("{y}"))
            .draw()?;
        for (i, (label, points)) in series.iter().enumerate() {
            let colour = COLOURS[i % COLOURS.len()];
            let points: Vec<(f64, f64)> = points.iter().map(|&(w, v)| (w as f64, v)).collect();
            chart
                .draw_series(LineSeries::new(points.clone(), colour.stroke_width(2)))?
                .label(label.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], colour.stroke_width(2))
                });
            chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, colour.filled())))?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperRight)
            .draw()?;
    }
    root.present()?;
    Ok(())
}

/// Throughput bars: per library, one bar per scenario (`scenarios`), pairs per second,
/// log-scaled. `values[lib][scenario]` is `None` when there is no figure.
pub(crate) fn throughput(
    path: &Path,
    title: &str,
    libs: &[String],
    scenarios: &[String],
    values: &[Vec<Option<f64>>],
) -> Result<()> {
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let (lo, hi) = bounds(values.iter().flatten().flatten().copied());
    let groups = libs.len();
    let bars = scenarios.len().max(1);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..groups as f64, (lo..hi).log_scale())?;
    let names = libs.to_vec();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(groups * 2 + 1)
        .x_label_formatter(&|x| {
            let i = x.floor() as usize;
            if (x - x.floor() - 0.5).abs() < 1e-6 && i < names.len() {
                names[i].clone()
            } else {
                String::new()
            }
        })
        .y_desc("acquire + release pairs per second")
        .y_labels(6)
        .y_label_formatter(&|y| format!("{y}"))
        .draw()?;
    let width = 0.8 / bars as f64;
    for (s, scenario) in scenarios.iter().enumerate() {
        let colour = COLOURS[s % COLOURS.len()];
        let rects: Vec<Rectangle<(f64, f64)>> = values
            .iter()
            .enumerate()
            .filter_map(|(g, row)| {
                let v = row.get(s).copied().flatten()?;
                let x0 = g as f64 + 0.1 + width * s as f64;
                Some(Rectangle::new(
                    [(x0, lo), (x0 + width * 0.95, v)],
                    colour.filled(),
                ))
            })
            .collect();
        chart
            .draw_series(rects)?
            .label(scenario.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], colour.filled()));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()?;
    root.present()?;
    Ok(())
}

/// Log-axis bounds around the values: a power of ten below the smallest and above the
/// largest.
fn bounds(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, 0f64);
    for v in values.filter(|v| *v > 0.0 && v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        return (1.0, 10.0);
    }
    (
        10f64.powf(lo.log10().floor()),
        10f64.powf(hi.log10().ceil()).max(lo * 10.0),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_bounds_are_powers_of_ten_around_the_values() {
        assert_eq!(bounds([4.2, 254.0].into_iter()), (1.0, 1000.0));
        assert_eq!(bounds([0.0, f64::NAN].into_iter()), (1.0, 10.0));
        assert_eq!(bounds([100.0].into_iter()), (100.0, 1000.0));
    }

    #[test]
    fn the_plots_are_svg_with_their_labels_as_text() {
        let dir = std::env::temp_dir().join(format!("mongolock-bench-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let series: Series = vec![
            ("lib-a".into(), vec![(1, 10.0), (8, 20.0), (64, 50.0)]),
            ("lib-b".into(), vec![(1, 250.0), (8, 260.0)]),
        ];
        let handoff = dir.join("h.svg");
        handoff_plot_ok(&handoff, &series);
        let text = std::fs::read_to_string(&handoff).unwrap();
        assert!(text.starts_with("<svg"), "{}", &text[..40.min(text.len())]);
        for label in ["lib-a", "lib-b", "waiters", "title", "panel"] {
            assert!(text.contains(label), "no {label} in the handoff plot");
        }
        let bars = dir.join("t.svg");
        throughput(
            &bars,
            "pairs",
            &["lib-a".into(), "lib-b".into()],
            &["64 on 64".into(), "64 on 1".into()],
            &[vec![Some(300.0), Some(120.0)], vec![Some(1800.0), None]],
        )
        .unwrap();
        let text = std::fs::read_to_string(&bars).unwrap();
        for label in ["lib-a", "lib-b", "64 on 64", "64 on 1"] {
            assert!(text.contains(label), "no {label} in the throughput plot");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn handoff_plot_ok(path: &Path, series: &Series) {
        handoff(path, "title", &[("panel".into(), series.clone())]).unwrap();
    }
}

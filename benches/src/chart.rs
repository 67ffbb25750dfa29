//! SVG charts for docs/, drawn with plotters from the rows a bench writes to JSON.

use plotters::prelude::*;

/// One bar: a contender's median in one scenario.
#[derive(Clone, Debug, PartialEq)]
pub struct Bar {
    /// The scenario (a group of bars).
    pub scenario: String,
    /// Who was measured.
    pub contender: String,
    /// The median, in ms.
    pub ms: f64,
}

/// The bars of the `network` rows of `scenarios.json` (`scenario`, `contender`, `median_ms`),
/// in file order. Rows without a median are left out.
pub fn bars_from_rows(rows: &serde_json::Value) -> Vec<Bar> {
    rows.as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| {
            Some(Bar {
                scenario: r["scenario"].as_str()?.to_owned(),
                contender: r["contender"].as_str()?.to_owned(),
                ms: r["median_ms"].as_f64().filter(|m| *m > 0.0)?,
            })
        })
        .collect()
}

/// Draws the chart of the `network` rows of `scenarios.json` and writes it to each of
/// `paths` (the bench's output directory and docs/img).
pub fn write_scenarios_chart(
    rows: &serde_json::Value,
    paths: &[std::path::PathBuf],
) -> Result<(), String> {
    let svg = scenarios_svg(
        "Dual-stack test network: time to a connected socket",
        &bars_from_rows(rows),
    )?;
    for path in paths {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        std::fs::write(path, &svg).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

/// Distinct values in first-seen order.
fn distinct<'a>(values: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut seen: Vec<&str> = Vec::new();
    for v in values {
        if !seen.contains(&v) {
            seen.push(v);
        }
    }
    seen
}

const COLOURS: [RGBColor; 4] = [
    RGBColor(0x1b, 0x9e, 0x77),
    RGBColor(0xd9, 0x5f, 0x02),
    RGBColor(0x75, 0x70, 0xb3),
    RGBColor(0x66, 0x66, 0x66),
];

/// A horizontal grouped bar chart, one group per scenario and one bar per contender, on a
/// logarithmic time axis (sequential connects take seconds where the others take
/// milliseconds). Each bar is labelled with its value.
pub fn scenarios_svg(title: &str, bars: &[Bar]) -> Result<String, String> {
    let scenarios = distinct(bars.iter().map(|b| b.scenario.as_str()));
    let contenders = distinct(bars.iter().map(|b| b.contender.as_str()));
    if scenarios.is_empty() {
        return Err("no rows to draw".to_owned());
    }
    let slot = contenders.len() + 1;
    let rows = scenarios.len() * slot;
    let (lo, hi) = bars.iter().fold((f64::MAX, 0.0f64), |(lo, hi), b| {
        (lo.min(b.ms), hi.max(b.ms))
    });
    let (lo, hi) = (lo / 2.0, hi * 4.0);
    let height = 120 + rows as u32 * 14;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1000, height)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let (left, right) = root.split_horizontally(430);
        let mut chart = ChartBuilder::on(&right)
            .caption(title, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(40)
            .build_cartesian_2d((lo..hi).log_scale(), 0.0..rows as f64)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .disable_y_axis()
            .x_desc("median time to a connected socket, ms (log scale)")
            .draw()
            .map_err(|e| e.to_string())?;
        for (c, contender) in contenders.iter().enumerate() {
            let colour = COLOURS[c % COLOURS.len()];
            let mine: Vec<(usize, f64)> = bars
                .iter()
                .filter(|b| b.contender == *contender)
                .filter_map(|b| Some((scenarios.iter().position(|s| *s == b.scenario)?, b.ms)))
                .collect();
            let y = |s: usize| (rows - s * slot - c - 1) as f64;
            chart
                .draw_series(mine.iter().map(|&(s, ms)| {
                    Rectangle::new([(lo, y(s) - 0.9), (ms, y(s) - 0.1)], colour.filled())
                }))
                .map_err(|e| e.to_string())?
                .label(*contender)
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 12, y + 5)], colour.filled())
                });
            chart
                .draw_series(mine.iter().map(|&(s, ms)| {
                    Text::new(
                        format!(" {ms:.1} ms"),
                        (ms, y(s) - 0.05),
                        ("sans-serif", 11),
                    )
                }))
                .map_err(|e| e.to_string())?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .draw()
            .map_err(|e| e.to_string())?;
        // Scenario names on the left, level with their group.
        let plot_top = 10 + 28;
        let plot_height = height as i32 - plot_top - 10 - 40;
        for (s, scenario) in scenarios.iter().enumerate() {
            let middle = s as f64 * slot as f64 + contenders.len() as f64 / 2.0;
            let y = plot_top + ((middle + 0.5) / rows as f64 * plot_height as f64) as i32;
            left.draw(&Text::new(
                scenario.to_string(),
                (8, y - 6),
                ("sans-serif", 12),
            ))
            .map_err(|e| e.to_string())?;
        }
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows() -> serde_json::Value {
        serde_json::json!([
            {"scenario": "IPv6 blackholed", "contender": "fastfallback", "median_ms": 272.3},
            {"scenario": "IPv6 blackholed", "contender": "hyper-util", "median_ms": 322.1},
            {"scenario": "second contact", "contender": "fastfallback", "median_ms": 20.4},
            {"scenario": "second contact", "contender": "hyper-util", "median_ms": 322.5},
            {"scenario": "broken row", "contender": "x"}
        ])
    }

    #[test]
    fn rows_without_a_median_are_left_out() {
        let bars = bars_from_rows(&rows());
        assert_eq!(bars.len(), 4);
        assert_eq!(bars[2].scenario, "second contact");
        assert_eq!(bars[2].ms, 20.4);
    }

    #[test]
    fn the_chart_has_a_bar_and_a_label_per_row_and_a_legend() {
        let svg = scenarios_svg("test", &bars_from_rows(&rows())).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..80]);
        for label in [
            "272.3",
            "322.1",
            "20.4",
            "322.5",
            "IPv6 blackholed",
            "second contact",
        ] {
            assert!(svg.contains(label), "{label} missing");
        }
        assert_eq!(svg.matches("fastfallback").count(), 1, "one legend entry");
        assert!(scenarios_svg("empty", &[]).is_err());
    }
}

//! `--plot FILE.svg`: validation quality over training time and over epochs, one line per run
//! (test quality for a task without a validation split: MF, LR, word vectors).

use std::path::Path;

use plotters::prelude::*;

use super::report::RunReport;

/// One evaluated epoch: training time so far, epoch, validation (else test) quality.
type Point = (f64, u32, f64);

/// A run's label in the legend: engine and technique, and the round under `--repeat`.
fn label(r: &RunReport, round: Option<usize>) -> String {
    let l = r.last();
    let name = if l.engine == "hogwild" { "hogwild".to_string() } else { l.technique.to_string() };
    match round {
        Some(i) => format!("{name} ({} x {}, round {})", l.nodes, l.workers, i + 1),
        None => format!("{name} ({} x {})", l.nodes, l.workers),
    }
}

/// Draws validation quality (MRR; test RMSE, AUC or analogy where there is no validation split) against training time (left) and against epochs (right) for every run
/// that was evaluated at least once, into an SVG file. `per_round` is the number of runs per
/// `--repeat` round (the rounds are labelled when there are several).
pub fn plot(path: &Path, reports: &[RunReport], per_round: usize, title: &str) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| format!("--plot {}: {e}", path.display());
    let rounds = reports.len().div_ceil(per_round.max(1));
    let series: Vec<(String, Vec<Point>)> = reports
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let points: Vec<Point> = r
                .epochs
                .iter()
                .filter_map(|e| {
                    e.valid.or(e.test).map(|v| (e.train_secs, e.epoch, v.primary())).filter(|p| !p.2.is_nan())
                })
                .collect();
            (label(r, (rounds > 1).then_some(i / per_round.max(1))), points)
        })
        .filter(|(_, p)| !p.is_empty())
        .collect();
    if series.is_empty() {
        return Err(err(
            &"no run has a validation figure (none was evaluated, or there was nothing to measure)",
        ));
    }
    let t_max = series.iter().flat_map(|(_, p)| p.iter().map(|x| x.0)).fold(0.0, f64::max).max(1e-3);
    let e_max = series.iter().flat_map(|(_, p)| p.iter().map(|x| x.1)).max().unwrap_or(1).max(1);
    let metric = reports
        .iter()
        .flat_map(|r| r.epochs.iter().filter_map(|e| e.valid.or(e.test)))
        .next()
        .map_or("MRR", |q| q.primary_name());
    let has_valid = reports.iter().any(|r| r.epochs.iter().any(|e| e.valid.is_some()));
    let split = if has_valid { "validation" } else { "test" };
    let y_max = if metric == "MRR" {
        1.0
    } else {
        1.1 * series.iter().flat_map(|(_, p)| p.iter().map(|x| x.2)).fold(0.0, f64::max).max(1e-3)
    };
    let (cap_time, cap_epochs) =
        (format!("{split} {metric} over training time"), format!("{split} {metric} over epochs"));
    let y_desc = if metric == "MRR" { "filtered MRR" } else { metric };
    let root = SVGBackend::new(path, (1200, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let root = root.titled(title, ("sans-serif", 20)).map_err(|e| err(&e))?;
    let (left, right) = root.split_horizontally(600);
    let mut over_time = ChartBuilder::on(&left)
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .caption(cap_time, ("sans-serif", 16))
        .build_cartesian_2d(0.0..t_max * 1.05, 0.0..y_max)
        .map_err(|e| err(&e))?;
    over_time
        .configure_mesh()
        .x_desc("training time (s, evaluation excluded)")
        .y_desc(y_desc)
        .draw()
        .map_err(|e| err(&e))?;
    let mut over_epochs = ChartBuilder::on(&right)
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .caption(cap_epochs, ("sans-serif", 16))
        .build_cartesian_2d(0u32..e_max + 1, 0.0..y_max)
        .map_err(|e| err(&e))?;
    over_epochs.configure_mesh().x_desc("epoch").y_desc(y_desc).draw().map_err(|e| err(&e))?;
    for (i, (name, points)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        over_time
            .draw_series(LineSeries::new(points.iter().map(|p| (p.0, p.2)), color.stroke_width(2)))
            .map_err(|e| err(&e))?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        over_time
            .draw_series(points.iter().map(|p| Circle::new((p.0, p.2), 3, color.filled())))
            .map_err(|e| err(&e))?;
        over_epochs
            .draw_series(LineSeries::new(points.iter().map(|p| (p.1, p.2)), color.stroke_width(2)))
            .map_err(|e| err(&e))?;
        over_epochs
            .draw_series(points.iter().map(|p| Circle::new((p.1, p.2), 3, color.filled())))
            .map_err(|e| err(&e))?;
    }
    over_time
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::Ranking;
    use crate::report::EpochRecord;
    use crate::task::Quality;

    fn run(technique: &'static str, mrrs: &[f64]) -> RunReport {
        let epochs = mrrs
            .iter()
            .enumerate()
            .map(|(i, m)| EpochRecord {
                task: "kge",
                data: "d".into(),
                model: "complex",
                engine: "parma",
                technique,
                nodes: 1,
                workers: 2,
                epoch: i as u32 + 1,
                epoch_secs: 0.1,
                train_secs: 0.1 * (i + 1) as f64,
                examples_per_sec: 1.0,
                loss: 1.0,
                valid: Some(Quality::Ranking(Ranking { mrr: *m, ..Ranking::default() })),
                test: None,
            })
            .collect();
        RunReport { epochs, ..RunReport::default() }
    }

    #[test]
    fn plots_one_line_per_run() {
        let path = std::env::temp_dir().join(format!("parma-plot-test-{}.svg", std::process::id()));
        let runs = [run("adaptive", &[0.3, 0.6, 0.8]), run("static", &[0.2, 0.5, 0.7])];
        plot(&path, &runs, 2, "test").unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.contains("adaptive (1 x 2)") && svg.contains("static (1 x 2)")
        );
        // A point per evaluated epoch, run and chart: 3 x 2 x 2.
        assert_eq!(svg.matches("<circle").count(), 12);
    }

    #[test]
    fn nothing_evaluated_is_an_error() {
        let mut r = run("adaptive", &[0.5]);
        r.epochs[0].valid = None;
        let e = plot(Path::new("/nonexistent/x.svg"), &[r], 1, "t").unwrap_err();
        assert!(e.contains("no run has a validation figure"), "{e}");
    }
}

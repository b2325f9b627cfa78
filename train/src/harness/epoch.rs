//! What the threads share ([`Ctx`]), and the end of an epoch: its record, the evaluation split
//! over the threads of the process that reports, and the record written out.
//!
//! Between the epoch's two barriers (see the harness's docs), when an evaluation is due:
//!
//! 1. thread 0 reads the whole model through its worker ([`super::read_all`]; remotely where
//!    needed) into the task's view, shared in the `Ctx` (one copy and one read, not one per
//!    thread);
//! 2. a barrier; each thread of the reporting process evaluates its share of the split's
//!    queries, in parts, into the `Ctx`;
//! 3. a barrier; thread 0 merges the parts into the split's quality and prints it. After the
//!    last epoch the test split follows the validation split the same way (2 and 3 again).
//!
//! Thread 0 then writes the epoch's record (`--metrics`, at once) before the second barrier:
//! after the last epoch the final figures are printed and written before anything that could
//! still fail (a checkpoint, the workers' finalize, the nodes' shutdown).
//!
//! Threads of the other processes of a cluster pass the same barriers and evaluate nothing.

use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};

use super::super::params::Params;
use super::super::report::EpochRecord;
use super::super::task::{figure, Quality, Task};
use super::super::{Engine, TrainError, TrainOptions};
use super::read_all;

/// Parts each thread cuts its share of a split into (the progress bar moves per part).
const PARTS_PER_THREAD: usize = 20;

/// Evaluated parts of a split, by their first query.
pub(super) type Parts<P> = Mutex<Vec<(usize, P)>>;

/// What the threads share.
pub(super) struct Ctx<'a, T: Task> {
    pub(super) task: &'a T,
    pub(super) data: &'a str,
    pub(super) opts: &'a TrainOptions,
    /// Loss summed over this process's threads in the current epoch.
    pub(super) loss: Mutex<f64>,
    /// Training examples of this process's threads (all of them unless it is one node of a
    /// cluster of processes, whose loss is its own threads').
    pub(super) local_examples: usize,
    /// The global number of this process's first thread.
    pub(super) first_thread: usize,
    /// This process's threads that evaluate: all of them in the process that reports (the
    /// one of thread 0), none elsewhere.
    pub(super) evaluators: usize,
    /// The current epoch's progress bar.
    pub(super) bar: Mutex<ProgressBar>,
    pub(super) records: Mutex<Vec<EpochRecord>>,
    pub(super) eval_secs: Mutex<f64>,
    pub(super) checksum: Mutex<u64>,
    /// Steps whose negatives local sampling could not draw (see `ParmaParams`).
    pub(super) fallbacks: Mutex<u64>,
    /// The first epoch to train: 1, or the one after the checkpoint resumed.
    pub(super) first_epoch: u32,
    /// Steps this process's threads took.
    pub(super) steps: Mutex<u64>,
    /// The epoch being ended, between thread 0's start and its record.
    pub(super) ending: Mutex<Option<Ending>>,
    /// The model as the task evaluates it, while an evaluation runs.
    pub(super) view: Mutex<Option<Arc<Vec<f32>>>>,
    /// The parts evaluated so far, by the first query of each: validation, then test.
    pub(super) parts: [Parts<T::Partial>; 2],
    /// The evaluation's progress bar.
    pub(super) eval_bar: Mutex<ProgressBar>,
}

/// An epoch's figures while it ends.
pub(super) struct Ending {
    secs: f64,
    train_secs: f64,
    loss: f64,
    valid: Option<Quality>,
    test: Option<Quality>,
    started: Instant,
}

impl<'a, T: Task> Ctx<'a, T> {
    /// The context of a run whose threads all run in this process (until told otherwise).
    pub(super) fn new(task: &'a T, data: &'a str, opts: &'a TrainOptions, first_epoch: u32) -> Self {
        Ctx {
            task,
            data,
            opts,
            loss: Mutex::new(0.0),
            local_examples: task.train().len(),
            first_thread: 0,
            evaluators: opts.threads(),
            bar: Mutex::new(ProgressBar::hidden()),
            records: Mutex::new(Vec::new()),
            eval_secs: Mutex::new(0.0),
            checksum: Mutex::new(0),
            fallbacks: Mutex::new(0),
            first_epoch,
            steps: Mutex::new(0),
            ending: Mutex::new(None),
            view: Mutex::new(None),
            parts: [Mutex::new(Vec::new()), Mutex::new(Vec::new())],
            eval_bar: Mutex::new(ProgressBar::hidden()),
        }
    }

    pub(super) fn new_bar(&self, epoch: u32) -> ProgressBar {
        if !self.opts.progress {
            return ProgressBar::hidden();
        }
        let bar = ProgressBar::new(self.task.train().len() as u64);
        let style = ProgressStyle::with_template(
            "{prefix} [{bar:30}] {pos}/{len} examples, {per_sec}, {elapsed_precise}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
        bar.set_style(style);
        bar.set_prefix(format!("epoch {epoch:>3}/{}", self.opts.epochs));
        bar
    }

    /// The splits evaluated after `epoch`, in order (`true`: test): none, validation, or
    /// validation then test after the last epoch; a task without a validation split
    /// evaluates its test split instead.
    pub(super) fn passes(&self, epoch: u32) -> Vec<bool> {
        let o = self.opts;
        let last = epoch == o.epochs;
        let due = last || (o.eval_every > 0 && epoch % o.eval_every == 0);
        match (due, self.task.has_validation(), last) {
            (false, _, _) => vec![],
            (true, false, _) => vec![true],
            (true, true, false) => vec![false],
            (true, true, true) => vec![false, true],
        }
    }

    /// Prints `line` above the bar `bar`, or as it is without a terminal (a log file, a pipe,
    /// `parma launch`, a batch job), where there is no bar and the line would be lost.
    fn say(&self, bar: &ProgressBar, line: String) {
        if !self.opts.progress {
            return;
        }
        if bar.is_hidden() {
            eprintln!("{line}");
        } else {
            bar.println(line);
        }
    }
}

/// FNV-1a over the bits of `vals`.
fn fnv(hash: u64, vals: &[f32]) -> u64 {
    vals.iter()
        .flat_map(|v| v.to_bits().to_le_bytes())
        .fold(hash, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01B3))
}

/// Every thread's work between an epoch's two barriers (thread `g`, epoch `epoch`, trained in
/// `secs`; thread 0's `train_secs` so far).
pub(super) fn end_epoch<T: Task, P: Params>(
    ctx: &Ctx<'_, T>,
    p: &mut P,
    g: usize,
    epoch: u32,
    secs: f64,
    train_secs: f64,
) -> Result<(), TrainError> {
    let passes = ctx.passes(epoch);
    if g == 0 {
        start(ctx, p, epoch, secs, train_secs, &passes)?;
    }
    if passes.is_empty() {
        return if g == 0 { finish(ctx, epoch) } else { Ok(()) };
    }
    p.barrier()?;
    let mut pass_started = Instant::now();
    for test in passes {
        evaluate_share(ctx, g, test)?;
        p.barrier()?;
        if g == 0 {
            merge(ctx, test, pass_started.elapsed().as_secs_f64())?;
        }
        pass_started = Instant::now();
    }
    if g == 0 {
        finish(ctx, epoch)?;
    }
    Ok(())
}

/// Thread 0: takes the epoch's loss, and reads the model into the shared view if an
/// evaluation is due.
fn start<T: Task, P: Params>(
    ctx: &Ctx<'_, T>,
    p: &mut P,
    epoch: u32,
    secs: f64,
    train_secs: f64,
    passes: &[bool],
) -> Result<(), TrainError> {
    let loss = std::mem::take(&mut *ctx.loss.lock().unwrap_or_else(|e| e.into_inner()));
    let started = Instant::now();
    ctx.bar.lock().unwrap_or_else(|e| e.into_inner()).finish();
    if !passes.is_empty() {
        let all = read_all(p, ctx.task.keys(), ctx.task.value_len())?;
        if epoch == ctx.opts.epochs {
            *ctx.checksum.lock().unwrap_or_else(|e| e.into_inner()) = fnv(0xcbf2_9ce4_8422_2325, &all);
            ctx.task.finished(&all);
        }
        *ctx.view.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(ctx.task.eval_view(all)));
        let queries: usize = passes.iter().map(|t| ctx.task.eval_len(*t)).sum();
        *ctx.eval_bar.lock().unwrap_or_else(|e| e.into_inner()) = eval_bar(ctx, epoch, queries);
    }
    let ending = Ending { secs, train_secs, loss, valid: None, test: None, started };
    *ctx.ending.lock().unwrap_or_else(|e| e.into_inner()) = Some(ending);
    Ok(())
}

fn eval_bar<T: Task>(ctx: &Ctx<'_, T>, epoch: u32, queries: usize) -> ProgressBar {
    if !ctx.opts.progress {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(queries as u64);
    let style = ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} queries, {elapsed_precise}")
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    bar.set_style(style);
    bar.set_prefix(format!("evaluating after epoch {epoch}"));
    bar
}

/// The queries of thread `i` of `n` among `len`.
fn share(len: usize, i: usize, n: usize) -> Range<usize> {
    len * i / n..len * (i + 1) / n
}

/// Thread `g` evaluates its share of the split (`test`), if its process reports.
fn evaluate_share<T: Task>(ctx: &Ctx<'_, T>, g: usize, test: bool) -> Result<(), TrainError> {
    let Some(i) = g.checked_sub(ctx.first_thread).filter(|i| *i < ctx.evaluators) else {
        return Ok(());
    };
    let view = ctx.view.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let view = view.ok_or(TrainError::Internal("no model to evaluate".into()))?;
    let bar = ctx.eval_bar.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let mine = share(ctx.task.eval_len(test), i, ctx.evaluators);
    let step = (mine.len() / PARTS_PER_THREAD).max(1);
    for at in mine.clone().step_by(step) {
        let part = at..(at + step).min(mine.end);
        let result = ctx.task.evaluate_part(&view, test, part.clone());
        ctx.parts[usize::from(test)].lock().unwrap_or_else(|e| e.into_inner()).push((at, result));
        bar.inc(part.len() as u64);
    }
    Ok(())
}

/// Thread 0, after every thread's share: the split's quality from its parts, printed.
fn merge<T: Task>(ctx: &Ctx<'_, T>, test: bool, secs: f64) -> Result<(), TrainError> {
    let mut parts =
        std::mem::take(&mut *ctx.parts[usize::from(test)].lock().unwrap_or_else(|e| e.into_inner()));
    parts.sort_by_key(|(at, _)| *at);
    let view = ctx.view.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let view = view.ok_or(TrainError::Internal("no model to merge on".into()))?;
    let q = ctx.task.merge(&view, test, parts.into_iter().map(|(_, p)| p).collect());
    let bar = ctx.eval_bar.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let name = if test { "test" } else { "valid" };
    let details = match q {
        Quality::Rmse { .. } => String::new(),
        q => format!(" ({})", q.details()),
    };
    ctx.say(&bar, format!("{name}: {} {}{details} in {secs:.2} s", q.primary_name(), figure(q.primary(), 4)));
    let mut ending = ctx.ending.lock().unwrap_or_else(|e| e.into_inner());
    let e = ending.as_mut().ok_or(TrainError::Internal("merge outside an epoch's end".into()))?;
    if test {
        e.test = Some(q);
    } else {
        e.valid = Some(q);
    }
    Ok(())
}

/// Thread 0: the epoch's record, printed, kept and appended to `--metrics`.
fn finish<T: Task>(ctx: &Ctx<'_, T>, epoch: u32) -> Result<(), TrainError> {
    let o = ctx.opts;
    let last = epoch == o.epochs;
    let e = ctx.ending.lock().unwrap_or_else(|e| e.into_inner()).take();
    let e = e.ok_or(TrainError::Internal("an epoch ended twice".into()))?;
    if ctx.view.lock().unwrap_or_else(|e| e.into_inner()).take().is_some() {
        ctx.eval_bar.lock().unwrap_or_else(|e| e.into_inner()).finish_and_clear();
        *ctx.eval_secs.lock().unwrap_or_else(|e| e.into_inner()) += e.started.elapsed().as_secs_f64();
    }
    let n = ctx.task.train().len() as f64;
    let local = ctx.local_examples.max(1) as f64;
    let rec = EpochRecord {
        task: ctx.task.name(),
        data: ctx.data.to_string(),
        model: ctx.task.model_name(),
        engine: o.engine.name(),
        technique: if o.engine == Engine::Parma { o.technique.name() } else { "-" },
        nodes: o.nodes,
        workers: o.workers,
        epoch,
        epoch_secs: e.secs,
        train_secs: e.train_secs,
        examples_per_sec: n / e.secs.max(1e-9),
        loss: e.loss / local,
        valid: e.valid,
        test: e.test,
    };
    if let Some(m) = &o.metrics {
        m.append(&rec).map_err(TrainError::Metrics)?;
    }
    let bar = ctx.bar.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let figure_of = |name: &str, q: Option<Quality>| {
        q.map_or(String::new(), |q| format!(", {name} {} {}", q.primary_name(), figure(q.primary(), 3)))
    };
    let line = format!(
        "epoch {epoch}: loss {:.4}, {:.3} s{}{}",
        rec.loss,
        e.secs,
        figure_of("valid", rec.valid),
        figure_of("test", rec.test),
    );
    ctx.say(&bar, line);
    ctx.records.lock().unwrap_or_else(|e| e.into_inner()).push(rec);
    if !last {
        *ctx.bar.lock().unwrap_or_else(|e| e.into_inner()) = ctx.new_bar(epoch + 1);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::share;

    #[test]
    fn shares_cover_the_queries_once_in_order() {
        for (len, n) in [(0, 3), (1, 4), (10, 3), (1827, 2), (7, 7)] {
            let all: Vec<usize> = (0..n).flat_map(|i| share(len, i, n)).collect();
            assert_eq!(all, (0..len).collect::<Vec<_>>(), "{len} over {n}");
        }
    }
}

//! `parma checkpoint export`: a key range of a checkpoint as one embedding table, row `i` the
//! value of key `start + i` (keys never written hold their initial value), `f32`, C order.
//!
//! Two formats, chosen by the output's extension: NumPy's `.npy` (written by the `npyz` crate;
//! `numpy.load(path)` reads it) and `.safetensors` (written by Hugging Face's `safetensors`
//! crate, one tensor named by `--name`; `safetensors.torch.load_file(path)` reads it). Both are
//! written to a temporary name and renamed into place.

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::ops::Range;
use std::path::Path;

use npyz::WriterBuilder;
use parma_runtime::checkpoint::Checkpoint;

/// The file formats of an export.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExportFormat {
    /// NumPy's `.npy`, version 1.0.
    Npy,
    /// safetensors, one `F32` tensor.
    Safetensors,
}

impl ExportFormat {
    /// The format an output path's extension names.
    pub fn of(out: &Path) -> Result<ExportFormat, String> {
        match out.extension().and_then(|e| e.to_str()) {
            Some("npy") => Ok(ExportFormat::Npy),
            Some("safetensors") => Ok(ExportFormat::Safetensors),
            _ => Err(format!("--out {}: the file name must end in .npy or .safetensors", out.display())),
        }
    }
}

/// Parses `A..B` (keys `A` up to but not including `B`, `A < B`).
pub fn parse_key_range(s: &str) -> Result<Range<u64>, String> {
    let bad = || format!("key range `{s}`: expected START..END with START < END, e.g. 0..135");
    let (a, b) = s.split_once("..").ok_or_else(bad)?;
    let (a, b) = (a.trim().parse::<u64>().map_err(|_| bad())?, b.trim().parse::<u64>().map_err(|_| bad())?);
    if a >= b {
        return Err(bad());
    }
    Ok(a..b)
}

/// What an export wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exported {
    /// Rows (keys).
    pub rows: usize,
    /// Columns (the value length).
    pub cols: usize,
}

/// Writes keys `keys` of the checkpoint in `dir` to `out` as one `rows × cols` table, after
/// checking the whole checkpoint (sizes, checksums, format). `name` names the safetensors
/// tensor.
pub fn export(dir: &Path, keys: Range<u64>, out: &Path, name: &str) -> Result<Exported, String> {
    let format = ExportFormat::of(out)?;
    if name.is_empty() {
        return Err("--name must not be empty".into());
    }
    let ck = Checkpoint::open(dir).map_err(|e| e.to_string())?;
    let (cols, table) = ck.table(keys.clone()).map_err(|e| e.to_string())?;
    let rows = table.len() / cols.max(1);
    let tmp = out.with_extension("tmp");
    let io = |e: std::io::Error| format!("cannot write {}: {e}", tmp.display());
    match format {
        ExportFormat::Npy => {
            let mut w = BufWriter::new(File::create(&tmp).map_err(io)?);
            let mut npy = npyz::WriteOptions::<f32>::new()
                .default_dtype()
                .shape(&[rows as u64, cols as u64])
                .writer(&mut w)
                .begin_nd()
                .map_err(io)?;
            npy.extend(table.iter().copied()).map_err(io)?;
            npy.finish().map_err(io)?;
            w.flush().map_err(io)?;
            w.get_ref().sync_all().map_err(io)?;
        }
        ExportFormat::Safetensors => {
            let bytes: Vec<u8> = table.iter().flat_map(|x| x.to_le_bytes()).collect();
            let view =
                safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![rows, cols], &bytes)
                    .map_err(|e| format!("safetensors: {e}"))?;
            let meta = [
                ("format".to_string(), "pt".to_string()),
                ("keys".to_string(), format!("{}..{}", keys.start, keys.end)),
            ];
            let data = safetensors::serialize([(name, view)], Some(meta.into_iter().collect()))
                .map_err(|e| format!("safetensors: {e}"))?;
            let mut f = File::create(&tmp).map_err(io)?;
            f.write_all(&data).map_err(io)?;
            f.sync_all().map_err(io)?;
        }
    }
    fs::rename(&tmp, out)
        .map_err(|e| format!("cannot rename {} to {}: {e}", tmp.display(), out.display()))?;
    Ok(Exported { rows, cols })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_ranges_and_formats_are_checked() {
        assert_eq!(parse_key_range("3..10"), Ok(3..10));
        for bad in ["3", "10..3", "3..3", "a..4", "..4"] {
            assert!(parse_key_range(bad).unwrap_err().contains("START..END"), "{bad}");
        }
        assert_eq!(ExportFormat::of(Path::new("e.npy")), Ok(ExportFormat::Npy));
        assert_eq!(ExportFormat::of(Path::new("e.safetensors")), Ok(ExportFormat::Safetensors));
        assert!(ExportFormat::of(Path::new("e.csv")).is_err());
    }
}

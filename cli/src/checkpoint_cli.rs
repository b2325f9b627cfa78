//! `parma checkpoint`: check a checkpoint, export a key range of it as an embedding table.

use std::ops::Range;
use std::path::PathBuf;

use clap::{Args, Subcommand};
use parma_cli::export::{export, parse_key_range};
use parma_runtime::checkpoint::Checkpoint;

/// What `parma checkpoint` does.
#[derive(Subcommand, Debug)]
pub enum CheckpointCommand {
    /// Read the manifest and every part (sizes, SHA-256, format, no key twice) and print what
    /// the checkpoint holds; fails, naming the damage, on a truncated or corrupted one.
    Verify {
        /// The checkpoint's directory.
        dir: PathBuf,
    },
    /// Write keys START..END as one table (row i: key START + i; keys never written hold
    /// their initial value) to a `.npy` (NumPy: `numpy.load`) or `.safetensors` file
    /// (PyTorch: `safetensors.torch.load_file`), chosen by --out's extension.
    Export(ExportArgs),
}

/// `parma checkpoint export`.
#[derive(Args, Debug)]
pub struct ExportArgs {
    /// The checkpoint's directory.
    pub dir: PathBuf,
    /// The keys, START..END (END excluded); all must have the same value length.
    #[arg(long, value_parser = parse_key_range)]
    pub keys: Range<u64>,
    /// The output file: NAME.npy or NAME.safetensors.
    #[arg(long)]
    pub out: PathBuf,
    /// The tensor's name in a safetensors file.
    #[arg(long, default_value = "embeddings")]
    pub name: String,
}

/// Runs a `parma checkpoint` command.
pub fn run(cmd: &CheckpointCommand) -> Result<(), String> {
    match cmd {
        CheckpointCommand::Verify { dir } => {
            let ck = Checkpoint::open(dir).map_err(|e| e.to_string())?;
            ck.scan(None, |_| false).map_err(|e| e.to_string())?;
            let m = ck.manifest();
            let len =
                m.value_len.map_or(format!("up to {} values", m.value_len_max), |l| format!("{l} values"));
            println!(
                "{}: valid; keys 0..{} of {len}, {} written in {} parts (the rest hold their initial value)",
                dir.display(),
                m.key_end,
                m.keys(),
                m.parts.len()
            );
            println!(
                "written by {} nodes x {} workers under {} ({} placement); clocks {:?}",
                m.nodes,
                m.workers_per_node,
                m.technique,
                m.placement,
                m.parts.iter().map(|p| p.clock).collect::<Vec<_>>()
            );
            for (k, v) in &m.extra {
                println!("{k}: {v}");
            }
            Ok(())
        }
        CheckpointCommand::Export(a) => {
            let e = export(&a.dir, a.keys.clone(), &a.out, &a.name)?;
            println!("wrote {} ({} rows x {} f32)", a.out.display(), e.rows, e.cols);
            Ok(())
        }
    }
}

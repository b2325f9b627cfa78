//! Training real models on an in-process parma cluster (`parma train`).
//!
//! - [`kg`]: knowledge graphs in the LibKGE layout, and the ones shipped with parma.

pub mod kg;

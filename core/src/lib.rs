#![no_std]
extern crate alloc;
#[cfg(any(test, feature = "std"))]
extern crate std;

pub mod config;
pub mod error;
pub mod ids;
pub mod layout;
pub mod store;
pub mod time;
pub mod transport;
pub mod wire;

//! Developer tools shipped in the binary.

pub mod learning;
pub mod upstream;

//! Developer tools shipped in the binary.

pub mod fuzz;
pub mod learning;
pub mod upstream;

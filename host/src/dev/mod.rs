//! Developer tools shipped in the binary.

pub mod fuzz;

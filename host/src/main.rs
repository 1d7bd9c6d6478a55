//! The `metaclaw` command: the core's daemon and its command line.

// `say!` and `say_raw!`: lines to a stdout that may be a closed pipe.
#[macro_use]
extern crate metaclaw_core;

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    cli::run(cli::Cli::parse())
}

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    metaclaw::cli::run(metaclaw::cli::Cli::parse())
}

//! What a command-line front (the `metaclaw` binary, the bench) needs from
//! the core to talk to a terminal: lines printed to a stdout that may be a
//! closed pipe, and the runtime a command's async work runs on.

/// Prints a line to stdout. A closed pipe (`metaclaw status | head -1`)
/// ends the process quietly, as SIGPIPE would, instead of panicking.
#[macro_export]
macro_rules! say {
    () => { $crate::term::emit(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::term::emit(format_args!("{}\n", format_args!($($arg)*))) };
}

/// [`say!`] without the newline.
#[macro_export]
macro_rules! say_raw {
    ($($arg:tt)*) => { $crate::term::emit(format_args!($($arg)*)) };
}

/// Writes to stdout; exits 141 (128 + SIGPIPE, what a shell reports for a
/// tool cut off by a pipe) when the reader has gone.
pub fn emit(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if out.write_fmt(args).and_then(|()| out.flush()).is_err() {
        std::process::exit(141);
    }
}

/// The multi-threaded runtime a command's async work runs on.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
}

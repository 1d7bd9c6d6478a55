//! Logs go to stderr, or, for the daemon `metaclaw start` runs in the
//! background, to its log file ([`RotatingLog`]), which it rotates itself
//! past `log.max_mb`. `RUST_LOG` overrides `log.level`.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

pub fn init(level: &str) {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter(level))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

/// Logs into `log` instead of stderr.
pub fn init_file(level: &str, log: RotatingLog) {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter(level))
        .with_writer(log)
        .with_ansi(false)
        .try_init();
}

fn filter(level: &str) -> EnvFilter {
    EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(level))
        .unwrap_or_else(|_| EnvFilter::new("info"))
}

/// Opens the log for appending (created private).
pub fn open_log(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

/// `metaclaw.log.N`.
pub fn rotated(path: &Path, n: u32) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{n}"));
    PathBuf::from(name)
}

/// Shifts `path` to `path.1`, `path.1` to `path.2` … keeping `keep` old
/// files (none with 0: `path` is removed). Missing files are skipped.
pub fn rotate_files(path: &Path, keep: u32) -> io::Result<()> {
    let skip_missing = |r: io::Result<()>| match r {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    };
    // Older ones, left by a larger `log.keep`, go.
    if let (Some(dir), Some(name)) = (path.parent(), path.file_name()) {
        let prefix = format!("{}.", name.to_string_lossy());
        for entry in std::fs::read_dir(dir)?.flatten() {
            let beyond = entry
                .file_name()
                .to_str()
                .and_then(|f| f.strip_prefix(&prefix))
                .and_then(|n| n.parse::<u32>().ok())
                .is_some_and(|n| n > keep);
            if beyond {
                skip_missing(std::fs::remove_file(entry.path()))?;
            }
        }
    }
    if keep == 0 {
        return skip_missing(std::fs::remove_file(path));
    }
    for n in (1..keep).rev() {
        skip_missing(std::fs::rename(rotated(path, n), rotated(path, n + 1)))?;
    }
    skip_missing(std::fs::rename(path, rotated(path, 1)))
}

/// A log file that rotates itself once it has passed `max_bytes`: before
/// the next line is written, the files are shifted ([`rotate_files`]) and a
/// new one is opened. Lines are written whole under one lock, so none is
/// cut or split across files; rotating costs renames and an open, under
/// that lock.
pub struct RotatingLog {
    path: PathBuf,
    max_bytes: u64,
    keep: u32,
    /// The process's stdout and stderr are this file (`start` opened it
    /// for the daemon): each new file replaces them too, so panics and
    /// printed lines follow the rotation.
    stdio: bool,
    current: Mutex<Current>,
}

struct Current {
    file: File,
    written: u64,
}

impl RotatingLog {
    pub fn open(path: &Path, max_bytes: u64, keep: u32) -> io::Result<Self> {
        let file = open_log(path)?;
        let written = file.metadata()?.len();
        Ok(Self {
            path: path.to_path_buf(),
            max_bytes,
            keep,
            stdio: stderr_is(path),
            current: Mutex::new(Current { file, written }),
        })
    }

    fn rotate(&self, current: &mut Current) {
        match rotate_files(&self.path, self.keep).and_then(|()| open_log(&self.path)) {
            Ok(file) => {
                if self.stdio
                    && let Err(e) = rustix::stdio::dup2_stdout(&file)
                        .and_then(|()| rustix::stdio::dup2_stderr(&file))
                {
                    // Not through tracing: its writer is what is rotating.
                    let _ = writeln!(
                        &file,
                        "metaclaw: cannot point stdout and stderr at the new log: {e}"
                    );
                }
                current.file = file;
                current.written = 0;
            }
            Err(e) => {
                // Keep writing where we are, and try again one limit later.
                let _ = writeln!(
                    current.file,
                    "metaclaw: cannot rotate {}: {e}",
                    self.path.display()
                );
                current.written = 0;
            }
        }
    }
}

/// Whether this process's stderr is the file at `path`.
fn stderr_is(path: &Path) -> bool {
    use std::os::fd::AsFd;
    let Ok(fd) = io::stderr().as_fd().try_clone_to_owned() else {
        return false;
    };
    match (File::from(fd).metadata(), std::fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// One event's writer: holds the lock until the event is written.
pub struct LogWriter<'a> {
    current: MutexGuard<'a, Current>,
}

impl<'a> MakeWriter<'a> for RotatingLog {
    type Writer = LogWriter<'a>;

    fn make_writer(&'a self) -> LogWriter<'a> {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        if current.written >= self.max_bytes {
            self.rotate(&mut current);
        }
        LogWriter { current }
    }
}

impl Write for LogWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.current.file.write(buf)?;
        self.current.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.current.file.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(path: &Path) -> Vec<String> {
        let text = std::fs::read_to_string(path).unwrap();
        assert!(
            text.is_empty() || text.ends_with('\n'),
            "cut line in {path:?}"
        );
        text.lines().map(str::to_string).collect()
    }

    /// `line N` and its padding, as the test logged it.
    fn number(line: &str) -> usize {
        let (_, rest) = line.split_once("line ").expect(line);
        let (n, pad) = rest.split_once(' ').expect(line);
        assert_eq!(pad, "x".repeat(40), "{line}");
        n.parse().unwrap()
    }

    fn log_lines(log: RotatingLog, threads: usize, each: usize) {
        let subscriber = tracing_subscriber::fmt()
            .with_writer(log)
            .with_ansi(false)
            .finish();
        let dispatch = tracing::Dispatch::new(subscriber);
        std::thread::scope(|scope| {
            for t in 0..threads {
                let dispatch = dispatch.clone();
                scope.spawn(move || {
                    tracing::dispatcher::with_default(&dispatch, || {
                        for i in 0..each {
                            tracing::info!("line {} {}", t * each + i, "x".repeat(40));
                        }
                    })
                });
            }
        });
    }

    #[test]
    fn past_the_limit_the_file_rotates_with_whole_lines_and_keep_old_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("metaclaw.log");
        // A leftover from a larger `log.keep` goes at the first rotation.
        std::fs::write(rotated(&path, 5), "old\n").unwrap();
        log_lines(RotatingLog::open(&path, 1000, 2).unwrap(), 1, 200);

        assert!(rotated(&path, 1).exists() && rotated(&path, 2).exists());
        assert!(!rotated(&path, 3).exists() && !rotated(&path, 5).exists());
        // Oldest first: .2, .1, then the current file; each a run of whole
        // lines, consecutive, ending with the last line logged.
        let mut seen = Vec::new();
        for file in [rotated(&path, 2), rotated(&path, 1), path.clone()] {
            let lines = lines(&file);
            assert!(!lines.is_empty(), "{file:?}");
            let size = std::fs::metadata(&file).unwrap().len();
            // Past the limit by less than one line.
            assert!(size < 1000 + 120, "{file:?}: {size} bytes");
            seen.extend(lines.iter().map(|l| number(l)));
        }
        assert_eq!(seen.last(), Some(&199));
        assert!(seen.windows(2).all(|w| w[1] == w[0] + 1), "{seen:?}");
        // The rotated files were full.
        assert!(std::fs::metadata(rotated(&path, 1)).unwrap().len() >= 1000);
    }

    #[test]
    fn threads_logging_at_once_lose_and_interleave_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("metaclaw.log");
        log_lines(RotatingLog::open(&path, 2000, 100).unwrap(), 8, 100);
        let mut numbers: Vec<usize> = (1..=100)
            .map(|n| rotated(&path, n))
            .chain([path.clone()])
            .filter(|p| p.exists())
            .flat_map(|p| lines(&p))
            .map(|l| number(&l))
            .collect();
        numbers.sort_unstable();
        assert_eq!(numbers, (0..800).collect::<Vec<_>>());
    }

    #[test]
    fn keep_zero_keeps_no_old_file_and_an_existing_log_counts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("metaclaw.log");
        std::fs::write(&path, "x".repeat(999) + "\n").unwrap();
        log_lines(RotatingLog::open(&path, 1000, 0).unwrap(), 1, 3);
        assert!(!rotated(&path, 1).exists());
        // The file was full: the first line opened a new one.
        let lines = lines(&path);
        assert_eq!(lines.len(), 3, "{lines:?}");
    }
}

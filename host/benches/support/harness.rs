//! Pieces the benches share: child processes that die with the bench,
//! their CPU time and memory from `/proc`, free ports, health polling and
//! percentiles.
#![allow(dead_code)]
#![allow(clippy::disallowed_methods)] // tests own and join their threads and servers

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_metaclaw");

/// A child process killed when dropped.
pub struct Proc(pub Child);

impl Proc {
    pub fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Spawns `cmd` and waits for the stdout line starting with `prefix`; the
/// rest of that line is returned (a URL), with the time it took. Stderr is
/// the caller's to direct.
pub fn spawn(mut cmd: Command, prefix: &str) -> (Proc, String, Duration) {
    let started = Instant::now();
    let mut child = cmd.stdout(Stdio::piped()).spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let url = loop {
        let line = lines.next().expect("process exited").unwrap();
        if let Some(url) = line.strip_prefix(prefix) {
            break url.trim().to_string();
        }
    };
    let elapsed = started.elapsed();
    std::thread::spawn(move || for _ in lines {});
    (Proc(child), url, elapsed)
}

/// The dummy upstream (the real binary); its base URL ends in `/v1`.
pub fn dummy() -> (Proc, String) {
    let mut cmd = Command::new(BIN);
    cmd.args(["dev", "upstream", "--port", "0"])
        .stderr(Stdio::null());
    let (proc, url, _) = spawn(cmd, "dummy upstream listening on ");
    (proc, url)
}

/// CPU seconds (user + system) a process has used so far.
pub fn cpu_secs(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // Fields after the `(comm)`: state is field 3, utime 14, stime 15.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11).and_then(|u| u.parse::<f64>().ok()).unwrap_or(0.0)
        + f.get(12).and_then(|s| s.parse::<f64>().ok()).unwrap_or(0.0);
    ticks / 100.0
}

fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|n| n.parse().ok()))
        })
        .unwrap_or(0)
}

/// Resident memory now.
pub fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:")
}

/// The most resident memory the process has had.
pub fn peak_rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmHWM:")
}

pub fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// A port nothing listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Polls `GET http://127.0.0.1:{port}{path}` (a raw HTTP/1.1 request, no
/// client start-up cost) every millisecond until it answers 200; the time
/// since `since`, or `None` after `limit`.
pub fn wait_healthy(port: u16, path: &str, since: Instant, limit: Duration) -> Option<Duration> {
    use std::io::{Read, Write};
    let request = format!("GET {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n");
    while since.elapsed() < limit {
        if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            let mut head = [0u8; 12];
            if s.write_all(request.as_bytes()).is_ok()
                && s.read_exact(&mut head).is_ok()
                && &head[9..12] == b"200"
            {
                return Some(since.elapsed());
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    None
}

pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// p50, p90, p99 and max of sorted latencies, in ms, as table cells.
pub fn latency_cells(sorted: &[Duration]) -> String {
    format!(
        "{:>9.3} {:>9.3} {:>9.3} {:>9.3}",
        ms(percentile(sorted, 50.0)),
        ms(percentile(sorted, 90.0)),
        ms(percentile(sorted, 99.0)),
        ms(*sorted.last().unwrap_or(&Duration::ZERO))
    )
}

/// What `other` adds to `base` at p50, p90 and p99 (ms), as table cells,
/// then the p50 and p99 ratios.
pub fn added_cells(base: &[Duration], other: &[Duration]) -> String {
    let d = |p| ms(percentile(other, p)) - ms(percentile(base, p));
    let r = |p| ms(percentile(other, p)) / ms(percentile(base, p)).max(1e-9);
    format!(
        "{:>+9.3} {:>+9.3} {:>+9.3}            ratio p50 {:.2}x, p99 {:.2}x",
        d(50.0),
        d(90.0),
        d(99.0),
        r(50.0),
        r(99.0)
    )
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

pub fn cpus() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0)
}

/// A bench's command line: `--flag` and `--flag VALUE`.
pub struct Args(Vec<String>);

impl Args {
    pub fn from_env() -> Self {
        Self(std::env::args().collect())
    }

    pub fn has(&self, flag: &str) -> bool {
        self.0.iter().any(|a| a == flag)
    }

    /// The word after `flag`.
    pub fn value(&self, flag: &str) -> Option<String> {
        self.0
            .iter()
            .position(|a| a == flag)
            .and_then(|i| self.0.get(i + 1))
            .cloned()
    }

    /// The word after each `flag` (a flag given more than once).
    pub fn values(&self, flag: &str) -> Vec<String> {
        self.0
            .windows(2)
            .filter(|w| w[0] == flag)
            .map(|w| w[1].clone())
            .collect()
    }
}

/// The load generator's runtime: two workers, as many as the machines
/// the results were recorded on have cores.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

//! What a plugin is: its kind and the WIT package version it was built
//! for (read from the component's exports), its budgets, and what `plugins
//! inspect` shows of it.

use crate::plugins::LoadRefused;
use std::path::PathBuf;
use std::time::Duration;

use semver::Version;
use serde::Serialize;
use wasmtime::component::Component;

use crate::plugins::bindings::types;

/// The WIT package version this host implements.
pub const PACKAGE: &str = "metaclaw:plugin";
pub const PACKAGE_VERSION: Version = Version::new(0, 1, 1);

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize, PartialOrd, Ord,
)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Retriever,
    Scorer,
    Evolver,
    Skill,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Retriever => "retriever",
            Kind::Scorer => "scorer",
            Kind::Evolver => "evolver",
            Kind::Skill => "skill",
        }
    }

    fn api(self) -> &'static str {
        match self {
            Kind::Retriever => "retriever-api",
            Kind::Scorer => "scorer-api",
            Kind::Evolver => "evolver-api",
            Kind::Skill => "skill-api",
        }
    }

    const ALL: [Kind; 4] = [Kind::Retriever, Kind::Scorer, Kind::Evolver, Kind::Skill];
}

impl From<types::PluginKind> for Kind {
    fn from(k: types::PluginKind) -> Self {
        match k {
            types::PluginKind::Retriever => Kind::Retriever,
            types::PluginKind::Scorer => Kind::Scorer,
            types::PluginKind::Evolver => Kind::Evolver,
            types::PluginKind::Skill => Kind::Skill,
        }
    }
}

/// Budgets for one plugin.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Memory of all the plugin's instances together (linear memories and
    /// tables).
    pub memory_bytes: usize,
    /// A call's deadline.
    pub timeout: Duration,
    /// A retriever's `index()` of the library (time spent waiting on the
    /// host's embedding backend is not counted, within its own budget).
    pub index_timeout: Duration,
    /// Instantiating and reading `metadata()` when the file is loaded.
    pub load_timeout: Duration,
    /// Consecutive failures before the plugin is disabled until reloaded.
    pub max_failures: u32,
    /// Its last `failure_window` calls failing more than `max_failure_rate`
    /// of the time disables it too (failures that never come in a row).
    pub failure_window: usize,
    pub max_failure_rate: f64,
    /// Ready instances kept for reuse, and calls running at once.
    pub pool_size: usize,
    /// Instances are replaced after this many calls (bounds slow leaks in
    /// guest runtimes).
    pub recycle_after: u32,
    /// Bytes one call may copy from the guest into the host (arguments of
    /// host functions, the results it returns).
    pub max_copy_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory_bytes: 128 << 20,
            timeout: Duration::from_millis(50),
            index_timeout: Duration::from_secs(30),
            load_timeout: Duration::from_secs(2),
            max_failures: 3,
            failure_window: 50,
            max_failure_rate: 0.25,
            pool_size: 4,
            recycle_after: 10_000,
            max_copy_bytes: 4 << 20,
        }
    }
}

/// Where a plugin file came from: shipped with metaclaw, or dropped in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    Builtin,
    User,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Builtin => "builtin",
            Source::User => "user",
        }
    }
}

/// What `plugins inspect` and `plugins list` show.
#[derive(Debug, Clone, Serialize)]
pub struct PluginInfo {
    pub name: String,
    pub version: Version,
    pub kind: Kind,
    pub description: String,
    /// Capabilities the plugin asks for (its metadata).
    pub asks: Vec<String>,
    /// The WIT package version it was built against.
    pub package: String,
    /// Interfaces it imports from the host (`metaclaw:plugin/clock`, `wasi:…`).
    pub imports: Vec<String>,
    pub sha256: String,
    pub path: PathBuf,
    pub size: u64,
    pub source: Source,
}

impl PluginInfo {
    /// Compiled into the binary (not a file: the lock does not pin it).
    pub fn embedded(&self) -> bool {
        self.path
            .starts_with(crate::plugins::embedded::EMBEDDED_DIR)
    }
}

/// The plugin kind a component implements, and the package version it was
/// built for, read from its exports (`metaclaw:plugin/scorer-api@0.1.0`).
pub fn detect(
    engine: &wasmtime::Engine,
    component: &Component,
) -> Result<(Kind, Version, Vec<String>), LoadRefused> {
    let ty = component.component_type();
    let exports: Vec<String> = ty
        .exports(engine)
        .map(|(name, _)| name.to_string())
        .collect();
    let imports: Vec<String> = ty
        .imports(engine)
        .map(|(name, _)| name.to_string())
        .collect();
    let mut found = None;
    for name in &exports {
        let Some(rest) = name.strip_prefix(&format!("{PACKAGE}/")) else {
            continue;
        };
        let (iface, version) = rest.split_once('@').unwrap_or((rest, ""));
        if let Some(kind) = Kind::ALL.into_iter().find(|k| k.api() == iface) {
            let version = Version::parse(version).map_err(|_| {
                LoadRefused::PackageNotSemver(crate::untrusted::log_line(name, 200))
            })?;
            found = Some((kind, version));
        }
    }
    let Some((kind, version)) = found else {
        return Err(LoadRefused::NotAPlugin(if exports.is_empty() {
            "nothing".to_string()
        } else {
            crate::untrusted::log_line(&exports.join(", "), 500)
        }));
    };
    if !compatible(&version) {
        return Err(LoadRefused::Incompatible { version });
    }
    // A plugin of a later release of the line loads if it only imports what
    // this host has; otherwise say so, rather than wasmtime's link error.
    if let Some(missing) = imports.iter().find(|name| {
        name.strip_prefix(&format!("{PACKAGE}/"))
            .map(|rest| rest.split_once('@').map_or(rest, |(iface, _)| iface))
            .is_some_and(|iface| !crate::plugins::engine::HOST_INTERFACES.contains(&iface))
    }) {
        return Err(LoadRefused::MissingImport {
            version,
            missing: crate::untrusted::log_line(missing, 200),
        });
    }
    if !exports
        .iter()
        .any(|e| e.starts_with(&format!("{PACKAGE}/plugin@")))
    {
        return Err(LoadRefused::NoMetadata);
    }
    Ok((kind, version, imports))
}

/// Same major version; for 0.x, the same minor.
pub fn compatible(v: &Version) -> bool {
    if PACKAGE_VERSION.major == 0 {
        v.major == 0 && v.minor == PACKAGE_VERSION.minor
    } else {
        v.major == PACKAGE_VERSION.major
    }
}

//! Why a plugin file is not loaded as what it says it is: each refusal a
//! variant, worded as `plugins list` and `status` show it (text the plugin
//! chose is cut to a safe line first, `untrusted::log_line`).

use semver::Version;

use super::loaded::{PACKAGE, PACKAGE_VERSION};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LoadRefused {
    /// Its compile ran past `plugins.timeouts.compile`.
    #[error("refused: {0}")]
    CompileTimedOut(String),
    #[error("not a valid component: {0}")]
    NotAComponent(String),
    #[error(
        "refused: its compiled code ({code}) does not fit in plugins.total_memory_mb ({used} of {limit} held by the plugins loaded)"
    )]
    CodeTooLarge {
        code: String,
        used: String,
        limit: String,
    },
    #[error(
        "refused: its compiled code ({code}) and one instance ({instance}) do not fit in plugins.total_memory_mb ({used} of {limit} held by the plugins loaded)"
    )]
    InstanceTooLarge {
        code: String,
        instance: String,
        used: String,
        limit: String,
    },
    #[error("it exports {0}, whose package version is not semver")]
    PackageNotSemver(String),
    #[error(
        "not a metaclaw plugin: it exports none of {PACKAGE}/{{retriever,scorer,evolver,skill}}-api (exports: {0})"
    )]
    NotAPlugin(String),
    #[error(
        "built for {PACKAGE}@{version}; this metaclaw loads plugins built for {PACKAGE}@{}.{}.x",
        PACKAGE_VERSION.major,
        PACKAGE_VERSION.minor
    )]
    Incompatible { version: Version },
    #[error(
        "built for {PACKAGE}@{version}, it imports {missing}, which this metaclaw ({PACKAGE}@{PACKAGE_VERSION}) does not have; upgrade metaclaw, or build the plugin for {PACKAGE}@{PACKAGE_VERSION}"
    )]
    MissingImport { version: Version, missing: String },
    #[error("it does not export {PACKAGE}/plugin (its metadata)")]
    NoMetadata,
    #[error("cannot link: {0}")]
    Link(String),
    #[error("cannot link as a {kind}: {error}")]
    LinkAs { kind: &'static str, error: String },
    #[error("metadata() failed: {0}")]
    MetadataFailed(String),
    #[error("its metadata says {declared} but it implements the {world} world")]
    WrongWorld {
        declared: &'static str,
        world: &'static str,
    },
    #[error("invalid plugin name {0:?} (1 to 64 letters, digits, - and _)")]
    BadName(String),
    #[error("version {version:?} is not semver: {error}")]
    VersionNotSemver { version: String, error: String },
    #[error(
        "refused: metaclaw.lock pins this file as {pinned}, but it now calls itself {calls_itself}"
    )]
    PinnedAsOther {
        pinned: String,
        calls_itself: String,
    },
    #[error(
        "refused: it calls itself {name:?}, the name of a first-party plugin. A drop-in replaces one only if the deployment names that file: plugins.overrides: [\"{name}@sha256:{sha256}\"] in the config, or `metaclaw plugins lock --override {name}`"
    )]
    FirstPartyName { name: String, sha256: String },
}

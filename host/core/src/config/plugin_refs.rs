//! How the config names plugins and what they are granted, parsed when the
//! config is loaded (a bad entry is an error naming its key, before
//! anything starts) and consumed, typed, by the plugin host.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use semver::VersionReq;
use serde::de::Deserializer;
use serde::ser::Serializer;
use serde::{Deserialize, Serialize};

/// `name` or `name@<semver requirement>` (e.g. `tool-error@^0.1`): a plugin
/// for a role (`plugins.retriever`, `plugins.scorers`, …).
/// Why a plugin reference or grant in the config is not one (the loader
/// names the key it came from).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RefError {
    #[error("{0:?}: a plugin name is required (name or name@version-requirement)")]
    NoName(String),
    #[error("{text:?}: {error} (e.g. tool-error@^0.1)")]
    BadRequirement { text: String, error: String },
    #[error(
        "{0:?}: write NAME or NAME@sha256:<hex> (the file's sha256, as `metaclaw plugins list` shows it)"
    )]
    NotAFileRef(String),
    #[error("{0:?}: a sha256 is 64 hexadecimal digits")]
    BadSha256(String),
    #[error("{0:?}: a plugin name is required")]
    NoFileName(String),
    #[error(
        "{0:?} must name the file by its sha256 (NAME@sha256:<hex>): a name alone is what any file can claim"
    )]
    Unpinned(String),
    #[error(
        "unknown capability {0:?} (use embed, clock, kv, outcomes, network, env:NAME or fs:/dir)"
    )]
    UnknownCapability(String),
}

#[derive(Debug, Clone, PartialEq)]
pub struct PluginSpec {
    pub name: String,
    pub req: VersionReq,
}

impl PluginSpec {
    pub fn parse(text: &str) -> Result<Self, RefError> {
        let (name, req) = match text.split_once('@') {
            Some((n, r)) => (n.trim(), r.trim()),
            None => (text.trim(), "*"),
        };
        if name.is_empty() {
            return Err(RefError::NoName(text.to_string()));
        }
        let req = VersionReq::parse(req).map_err(|e| RefError::BadRequirement {
            text: text.to_string(),
            error: e.to_string(),
        })?;
        Ok(Self {
            name: name.to_string(),
            req,
        })
    }

    /// `name`, any version.
    pub fn any(name: &str) -> Self {
        Self {
            name: name.to_string(),
            req: VersionReq::STAR,
        }
    }
}

impl FromStr for PluginSpec {
    type Err = RefError;
    fn from_str(text: &str) -> Result<Self, RefError> {
        Self::parse(text)
    }
}

impl fmt::Display for PluginSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.req == VersionReq::STAR {
            write!(f, "{}", self.name)
        } else {
            write!(f, "{}@{}", self.name, self.req)
        }
    }
}

/// `NAME` or `NAME@sha256:<64 hex>`: a plugin file, by the name it claims
/// or by its content (the keys of `plugins.grants`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct FileRef {
    pub name: String,
    /// Lowercase hex.
    pub sha256: Option<String>,
}

impl FileRef {
    pub fn parse(text: &str) -> Result<Self, RefError> {
        let (name, sha) = match text.split_once('@') {
            Some((name, rest)) => {
                let Some(hex) = rest.strip_prefix("sha256:") else {
                    return Err(RefError::NotAFileRef(text.to_string()));
                };
                let hex = hex.to_ascii_lowercase();
                if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(RefError::BadSha256(text.to_string()));
                }
                (name, Some(hex))
            }
            None => (text, None),
        };
        let name = name.trim();
        if name.is_empty() {
            return Err(RefError::NoFileName(text.to_string()));
        }
        Ok(Self {
            name: name.to_string(),
            sha256: sha,
        })
    }
}

impl FromStr for FileRef {
    type Err = RefError;
    fn from_str(text: &str) -> Result<Self, RefError> {
        Self::parse(text)
    }
}

impl fmt::Display for FileRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.sha256 {
            Some(sha) => write!(f, "{}@sha256:{sha}", self.name),
            None => write!(f, "{}", self.name),
        }
    }
}

/// `NAME@sha256:<64 hex>`: one file, named by its content (the entries of
/// `plugins.overrides`). A name alone is refused: any file can claim one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilePin {
    pub name: String,
    /// Lowercase hex.
    pub sha256: String,
}

impl FromStr for FilePin {
    type Err = RefError;
    fn from_str(text: &str) -> Result<Self, RefError> {
        let file = FileRef::parse(text)?;
        match file.sha256 {
            Some(sha256) => Ok(Self {
                name: file.name,
                sha256,
            }),
            None => Err(RefError::Unpinned(text.to_string())),
        }
    }
}

impl fmt::Display for FilePin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@sha256:{}", self.name, self.sha256)
    }
}

/// Capabilities granted to one plugin (`plugins.grants` in the config):
/// `embed`, `clock`, `kv`, `outcomes`, `network`, `env:NAME`, `fs:/dir`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grants {
    pub embed: bool,
    pub clock: bool,
    pub kv: bool,
    /// Each skill's outcomes (retrievers).
    pub outcomes: bool,
    pub network: bool,
    pub env: Vec<String>,
    /// Directories the plugin may read (mounted at the same path).
    pub read_dirs: Vec<PathBuf>,
}

impl Grants {
    pub fn parse(items: &[String]) -> Result<Self, RefError> {
        let mut g = Grants::default();
        g.add(items)?;
        Ok(g)
    }

    /// Adds `items` to what is granted.
    pub fn add(&mut self, items: &[String]) -> Result<(), RefError> {
        for item in items {
            match item.as_str() {
                "embed" => self.embed = true,
                "clock" => self.clock = true,
                "kv" => self.kv = true,
                "outcomes" => self.outcomes = true,
                "network" => self.network = true,
                other => {
                    if let Some(var) = other.strip_prefix("env:") {
                        if !self.env.iter().any(|v| v == var) {
                            self.env.push(var.to_string());
                        }
                    } else if let Some(dir) = other.strip_prefix("fs:") {
                        let dir = PathBuf::from(dir);
                        if !self.read_dirs.contains(&dir) {
                            self.read_dirs.push(dir);
                        }
                    } else {
                        return Err(RefError::UnknownCapability(other.to_string()));
                    }
                }
            }
        }
        Ok(())
    }

    /// Adds what `other` grants.
    pub fn merge(&mut self, other: &Grants) {
        self.embed |= other.embed;
        self.clock |= other.clock;
        self.kv |= other.kv;
        self.outcomes |= other.outcomes;
        self.network |= other.network;
        for var in &other.env {
            if !self.env.contains(var) {
                self.env.push(var.clone());
            }
        }
        for dir in &other.read_dirs {
            if !self.read_dirs.contains(dir) {
                self.read_dirs.push(dir.clone());
            }
        }
    }

    /// The names, as written in the config.
    pub fn names(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (on, name) in [
            (self.embed, "embed"),
            (self.clock, "clock"),
            (self.kv, "kv"),
            (self.outcomes, "outcomes"),
            (self.network, "network"),
        ] {
            if on {
                out.push(name.to_string());
            }
        }
        out.extend(self.env.iter().map(|v| format!("env:{v}")));
        out.extend(self.read_dirs.iter().map(|d| format!("fs:{}", d.display())));
        out
    }
}

// In the file, a grant is the list of its names.
impl Serialize for Grants {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.names().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Grants {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let items = Vec::<String>::deserialize(d)?;
        Grants::parse(&items).map_err(serde::de::Error::custom)
    }
}

super::serde_as_text!(PluginSpec);
super::serde_as_text!(FileRef);
super::serde_as_text!(FilePin);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_print_back() {
        let s = PluginSpec::parse("tool-error@^0.1").unwrap();
        assert_eq!(s.name, "tool-error");
        assert!(s.req.matches(&semver::Version::new(0, 1, 3)));
        assert_eq!(s.to_string(), "tool-error@^0.1");
        assert_eq!(PluginSpec::parse("bm25").unwrap(), PluginSpec::any("bm25"));
        assert_eq!(PluginSpec::any("bm25").to_string(), "bm25");
        assert!(
            PluginSpec::parse("x@not-a-req")
                .unwrap_err()
                .to_string()
                .contains("tool-error@^0.1")
        );
        assert!(PluginSpec::parse("@1").is_err());
    }

    #[test]
    fn file_refs_and_pins() {
        let sha = "A".repeat(64);
        let r: FileRef = format!("guard@sha256:{sha}").parse().unwrap();
        assert_eq!(r.sha256.as_deref(), Some("a".repeat(64).as_str()));
        assert_eq!(r.to_string(), format!("guard@sha256:{}", "a".repeat(64)));
        assert_eq!("notes".parse::<FileRef>().unwrap().sha256, None);
        assert_eq!(
            "x@sha256:12".parse::<FileRef>().unwrap_err(),
            RefError::BadSha256("x@sha256:12".into())
        );
        assert!("x@1.0".parse::<FileRef>().is_err());
        assert!("@sha256:".parse::<FileRef>().is_err());
        let pin: FilePin = format!("guard@sha256:{sha}").parse().unwrap();
        assert_eq!(pin.sha256, "a".repeat(64));
        // A name alone is what any file can claim.
        assert_eq!(
            "guard".parse::<FilePin>().unwrap_err(),
            RefError::Unpinned("guard".into())
        );
    }

    #[test]
    fn grants_parse_merge_and_print_back() {
        let items: Vec<String> = ["clock", "env:HOME", "fs:/tmp/x", "network"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let g = Grants::parse(&items).unwrap();
        assert!(g.clock && g.network && !g.embed);
        assert_eq!(g.env, vec!["HOME"]);
        assert_eq!(g.names(), vec!["clock", "network", "env:HOME", "fs:/tmp/x"]);
        assert_eq!(
            Grants::parse(&["root".to_string()]).unwrap_err(),
            RefError::UnknownCapability("root".into())
        );
        let mut more = Grants::parse(&["kv".into(), "env:HOME".into(), "env:LANG".into()]).unwrap();
        more.merge(&g);
        assert_eq!(
            more.names(),
            vec![
                "clock",
                "kv",
                "network",
                "env:HOME",
                "env:LANG",
                "fs:/tmp/x"
            ]
        );
    }
}

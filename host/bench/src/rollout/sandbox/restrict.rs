//! Landlock, the sandbox's second layer: even inside its own root, the
//! command may only read and execute the system dirs and `/etc`, use the
//! few devices, and change `/work` and `/tmp`. TCP bind and connect (ABI
//! 4+), connecting to Unix sockets outside `/work` and `/tmp` (ABI 9+) and
//! UDP (ABI 10+) are denied, and so are signals to and abstract Unix
//! sockets of processes outside the sandbox (ABI 6+). Each right the
//! running kernel lacks is dropped (the crate's best-effort mode); the
//! namespaces confine alone where Landlock is missing.

use std::os::fd::BorrowedFd;

use anyhow::{Context, Result};
use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, LandlockStatus, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope,
};

use super::enter::{CHECK_BIN, WORKDIR};
use super::mounts::{DEVICES, SYSTEM};

/// The newest ABI this code knows; older kernels get the subset they have.
const ABI_KNOWN: ABI = ABI::V10;

/// Restricts this process (and what it starts) to the sandbox's paths,
/// and the real workspace `real` (the helper mirrors `/work` back into it
/// through that fd; the command has neither the fd nor a path to it);
/// says what was enforced.
pub fn landlock(real: BorrowedFd<'_>) -> Result<String> {
    let read = AccessFs::from_read(ABI_KNOWN);
    let all = AccessFs::from_all(ABI_KNOWN);
    let device = AccessFs::from_file(ABI_KNOWN)
        & (AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev);
    let mut rules: Vec<(String, BitFlags<AccessFs>)> = SYSTEM
        .iter()
        .chain(&["/etc"])
        .filter(|p| std::path::Path::new(p).exists())
        .map(|p| (p.to_string(), read))
        .collect();
    // A check's `python` wrappers (read-only in the sandbox's root).
    if std::path::Path::new(CHECK_BIN).exists() {
        rules.push((CHECK_BIN.to_string(), read));
    }
    // Listing `/` (the sandbox's own root): agents look around first.
    rules.push(("/".to_string(), AccessFs::ReadDir.into()));
    rules.push((WORKDIR.to_string(), all));
    rules.push(("/tmp".to_string(), all));
    for name in DEVICES {
        let path = format!("/dev/{name}");
        if std::path::Path::new(&path).exists() {
            let access = if name.ends_with("random") {
                AccessFs::ReadFile.into()
            } else {
                device
            };
            rules.push((path, access));
        }
    }

    let mut ruleset = Ruleset::default()
        .handle_access(all)?
        .handle_access(AccessNet::from_all(ABI_KNOWN))?
        .scope(Scope::from_all(ABI_KNOWN))?
        .create()?;
    for (path, access) in rules {
        let fd = PathFd::new(&path).with_context(|| format!("landlock: cannot open {path}"))?;
        ruleset = ruleset.add_rule(PathBeneath::new(fd, access))?;
    }
    ruleset = ruleset.add_rule(PathBeneath::new(real, all))?;
    let status = ruleset
        .restrict_self()
        .context("landlock: cannot restrict the sandbox")?;
    let abi = match status.landlock {
        LandlockStatus::Available { effective_abi, .. } => format!("ABI {effective_abi}"),
        LandlockStatus::NotEnabled => "not enabled in this kernel".into(),
        LandlockStatus::NotImplemented => "not in this kernel".into(),
    };
    Ok(match status.ruleset {
        RulesetStatus::FullyEnforced => format!("Landlock {abi}: fully enforced"),
        RulesetStatus::PartiallyEnforced => {
            format!("Landlock {abi}: enforced as far as this kernel can")
        }
        RulesetStatus::NotEnforced => format!("Landlock {abi}: not enforced (namespaces only)"),
    })
}

//! Pins under bpffs, so enforcement outlives the agent and a new agent adopts it:
//! `<root>/maps-v<N>/<MAP>` for the enforcement state and `<root>/links/<name>` for the
//! attached programs. A new agent attaches its own programs first, then swaps each pin,
//! so at every instant at least one set of programs enforces from the same maps.

use std::{
    collections::HashSet,
    fs, io,
    path::{Path, PathBuf},
};

use aya::programs::links::{FdLink, PinnedLink};
use nix::sys::statfs::{BPF_FS_MAGIC, statfs};
use tracing::{debug, info};
use volguard_common::maps::{OWNERS, PIN_LAYOUT_VERSION};

/// Where pins live unless configured otherwise.
pub const DEFAULT_PIN_ROOT: &str = "/sys/fs/bpf/volguard";
const BPFFS: &str = "/sys/fs/bpf";
/// Suffix of a link pinned beside the one it replaces (bpffs refuses dots in names).
const NEW_SUFFIX: &str = "~new";

#[derive(Debug, thiserror::Error)]
pub enum PinError {
    #[error("{path} is not on a BPF filesystem (bpffs); pins must live under a bpffs mount such as {BPFFS}")]
    NotBpffs { path: String },
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: String,
        #[source]
        source: io::Error,
    },
    #[error("pinning link {name}: {source}")]
    Pin {
        name: String,
        #[source]
        source: aya::pin::PinError,
    },
    #[error("opening pinned link {path}: {source}")]
    OpenPinned {
        path: String,
        #[source]
        source: aya::programs::links::LinkError,
    },
}

fn io_error(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> PinError {
    let path = path.display().to_string();
    move |source| PinError::Io { action, path, source }
}

/// The pin directory tree of one agent installation.
#[derive(Clone, Debug)]
pub struct Pins {
    root: PathBuf,
}

impl Pins {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn maps_dir(&self) -> PathBuf {
        self.root.join(format!("maps-v{PIN_LAYOUT_VERSION}"))
    }

    fn links_dir(&self) -> PathBuf {
        self.root.join("links")
    }

    /// Where map `name` is pinned.
    pub fn map_path(&self, name: &str) -> PathBuf {
        self.maps_dir().join(name)
    }

    /// Whether an earlier agent left enforcement state to adopt.
    pub fn has_state(&self) -> bool {
        self.map_path(OWNERS).exists()
    }

    /// Makes sure bpffs is mounted and the directories exist.
    pub fn prepare(&self) -> Result<(), PinError> {
        ensure_bpffs(&self.root)?;
        for dir in [self.maps_dir(), self.links_dir()] {
            fs::create_dir_all(&dir).map_err(io_error("creating", &dir))?;
        }
        Ok(())
    }

    /// Pins `links` (by name), replacing what an earlier agent pinned, and removes pins
    /// of links this agent no longer has. Returns how many earlier pins were replaced.
    pub fn install_links(&self, links: Vec<(String, FdLink)>) -> Result<usize, PinError> {
        let dir = self.links_dir();
        let mut replaced = 0;
        let mut names = HashSet::new();
        for (name, link) in links {
            let final_path = dir.join(&name);
            let new_path = dir.join(format!("{name}{NEW_SUFFIX}"));
            remove_pinned_link(&new_path)?;
            link.pin(&new_path).map_err(|source| PinError::Pin { name: name.clone(), source })?;
            // Ours is attached and pinned: the earlier one can go now.
            if remove_pinned_link(&final_path)? {
                replaced += 1;
            }
            fs::rename(&new_path, &final_path).map_err(io_error("renaming", &new_path))?;
            names.insert(name);
        }
        for entry in fs::read_dir(&dir).map_err(io_error("listing", &dir))? {
            let entry = entry.map_err(io_error("listing", &dir))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if !names.contains(&name) {
                info!("removing stale pinned link {name}");
                remove_pinned_link(&entry.path())?;
            }
        }
        Ok(replaced)
    }

    /// Removes every pin: the programs detach and the state is freed once no agent holds
    /// them. Returns false if there was nothing to remove.
    pub fn uninstall(&self) -> Result<bool, PinError> {
        if !self.root.exists() {
            return Ok(false);
        }
        fs::remove_dir_all(&self.root).map_err(io_error("removing", &self.root))?;
        Ok(true)
    }
}

/// Unpins (and so detaches, unless someone else holds it) the link pinned at `path`.
fn remove_pinned_link(path: &Path) -> Result<bool, PinError> {
    if !path.exists() {
        return Ok(false);
    }
    match PinnedLink::from_pin(path) {
        Ok(pinned) => {
            pinned.unpin().map_err(io_error("unpinning", path))?;
        }
        Err(e) => {
            debug!("{} is not a loadable link ({e}); removing the file", path.display());
            fs::remove_file(path).map_err(io_error("removing", path))?;
        }
    }
    Ok(true)
}

/// Mounts bpffs on /sys/fs/bpf when `path` is under it and it is not mounted yet.
fn ensure_bpffs(path: &Path) -> Result<(), PinError> {
    let on_bpffs = |p: &Path| statfs(p).is_ok_and(|s| s.filesystem_type() == BPF_FS_MAGIC);
    let existing = path.ancestors().find(|p| p.exists()).unwrap_or(Path::new("/"));
    if on_bpffs(existing) {
        return Ok(());
    }
    if path.starts_with(BPFFS) && !on_bpffs(Path::new(BPFFS)) {
        info!("mounting bpffs on {BPFFS}");
        nix::mount::mount(Some("bpf"), BPFFS, Some("bpf"), nix::mount::MsFlags::empty(), None::<&str>)
            .map_err(|e| io_error("mounting bpffs on", Path::new(BPFFS))(e.into()))?;
        return Ok(());
    }
    Err(PinError::NotBpffs { path: path.display().to_string() })
}

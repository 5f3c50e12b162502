//! Pins under bpffs, so enforcement outlives the agent and a new agent adopts it:
//! `<root>/maps-v<N>/<MAP>` for the enforcement state and `<root>/links/<name>` for the
//! attached programs. A new agent attaches its own programs first, then swaps each pin,
//! so at every instant at least one set of programs enforces from the same maps.

use std::{
    collections::HashSet,
    fs, io,
    path::{Path, PathBuf},
};

use std::time::{Duration, Instant};

use aya::{
    maps::{HashMap as AyaHashMap, Map, MapData},
    programs::{
        links::{FdLink, PinnedLink},
        loaded_links, loaded_programs,
    },
};
use nix::sys::statfs::{BPF_FS_MAGIC, statfs};
use tracing::{debug, info, warn};
use volguard_common::{
    enforce::PendingClaim,
    maps::{CLAIMS, OWNERS, PIN_LAYOUT_VERSION},
};

/// Where pins live unless configured otherwise.
pub const DEFAULT_PIN_ROOT: &str = "/sys/fs/bpf/volguard";
const BPFFS: &str = "/sys/fs/bpf";
/// Suffix of a link pinned beside the one it replaces (bpffs refuses dots in names).
const NEW_SUFFIX: &str = "~new";
/// Names of the pinned links that settle claims at syscall exit (`Hook::link_name`).
const EXIT_TRACEPOINT_LINK_PREFIX: &str = "tp-sys_exit_";
const FEXIT_LINK_PREFIX: &str = "tramp-fexit_";
/// How long an earlier agent's exit programs stay at least, and at most, after ours
/// (fexit) are attached: see [`Pins::install_links`].
const SETTLE_GRACE: Duration = Duration::from_millis(500);
const SETTLE_LIMIT: Duration = Duration::from_secs(10);
/// How long [`Pins::uninstall`] waits for the kernel to detach the unpinned links.
pub const DETACH_LIMIT: Duration = Duration::from_secs(30);

/// Whether the link pinned under `name` settles claims at syscall exit.
pub fn settles_claims(name: &str) -> bool {
    let name = name.strip_suffix(NEW_SUFFIX).unwrap_or(name);
    name.starts_with(EXIT_TRACEPOINT_LINK_PREFIX) || name.starts_with(FEXIT_LINK_PREFIX)
}

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
    ///
    /// When our exit programs are fexit trampolines, an earlier agent's exit programs go
    /// last, once no claim waits for settlement (see `wait_for_claims`): a
    /// trampoline sees only the calls that entered its function after it was attached, so
    /// a mount in flight across the switch is settled by the earlier exit program.
    pub fn install_links(&self, links: Vec<(String, FdLink)>) -> Result<usize, PinError> {
        let dir = self.links_dir();
        let fexit_exits = links.iter().any(|(name, _)| name.starts_with(FEXIT_LINK_PREFIX));
        let mut replaced = 0;
        let mut names = HashSet::new();
        // (ours, pinned beside; the earlier one) kept until the claims are settled.
        let mut swaps = Vec::new();
        for (name, link) in links {
            let final_path = dir.join(&name);
            let new_path = dir.join(format!("{name}{NEW_SUFFIX}"));
            remove_pinned_link(&new_path)?;
            link.pin(&new_path).map_err(|source| PinError::Pin { name: name.clone(), source })?;
            names.insert(name.clone());
            if fexit_exits && settles_claims(&name) && final_path.exists() {
                swaps.push((new_path, final_path));
                continue;
            }
            // Ours is attached and pinned: the earlier one can go now.
            if remove_pinned_link(&final_path)? {
                replaced += 1;
            }
            fs::rename(&new_path, &final_path).map_err(io_error("renaming", &new_path))?;
        }
        let mut draining = Vec::new();
        for entry in fs::read_dir(&dir).map_err(io_error("listing", &dir))? {
            let entry = entry.map_err(io_error("listing", &dir))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if names.contains(&name) || swaps.iter().any(|(new, _)| new == &entry.path()) {
                continue;
            }
            if fexit_exits && settles_claims(&name) {
                draining.push(entry.path());
                continue;
            }
            info!("removing stale pinned link {name}");
            remove_pinned_link(&entry.path())?;
        }
        if !swaps.is_empty() || !draining.is_empty() {
            self.wait_for_claims(swaps.len() + draining.len());
        }
        for path in draining {
            info!("removing the earlier agent's exit program {}", path.display());
            remove_pinned_link(&path)?;
        }
        for (new_path, final_path) in swaps {
            if remove_pinned_link(&final_path)? {
                replaced += 1;
            }
            fs::rename(&new_path, &final_path).map_err(io_error("renaming", &new_path))?;
        }
        Ok(replaced)
    }

    /// Waits (at least [`SETTLE_GRACE`], at most [`SETTLE_LIMIT`]) until the pinned claims
    /// map holds no claim waiting for its syscall's exit.
    fn wait_for_claims(&self, kept: usize) {
        let started = Instant::now();
        let path = self.map_path(CLAIMS);
        let pending = || -> Option<usize> {
            let data = MapData::from_pin(&path).ok()?;
            let claims: AyaHashMap<MapData, u64, PendingClaim> = AyaHashMap::try_from(Map::LruHashMap(data)).ok()?;
            Some(claims.keys().count())
        };
        loop {
            let waiting = pending().unwrap_or(0);
            let elapsed = started.elapsed();
            if (waiting == 0 && elapsed >= SETTLE_GRACE) || elapsed >= SETTLE_LIMIT {
                info!(
                    "kept {kept} earlier exit program(s) for {:.1} s while claims settled; {waiting} claim(s) pending",
                    elapsed.as_secs_f64()
                );
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Removes every pin: the programs detach and the state is freed once no agent holds
    /// them. Returns false if there was nothing to remove. Returns once the kernel has
    /// detached the links (it does so from a work queue, and each trampoline's detach
    /// waits for a grace period), or after [`DETACH_LIMIT`] with a warning.
    pub fn uninstall(&self) -> Result<bool, PinError> {
        if !self.root.exists() {
            return Ok(false);
        }
        let ids = self.pinned_link_ids();
        fs::remove_dir_all(&self.root).map_err(io_error("removing", &self.root))?;
        wait_for_detach(&ids);
        Ok(true)
    }

    /// The kernel ids of the links pinned now and of their programs (the descriptors
    /// opened to ask are closed).
    fn pinned_link_ids(&self) -> Vec<(u32, u32)> {
        let Ok(entries) = fs::read_dir(self.links_dir()) else { return Vec::new() };
        entries
            .filter_map(|e| PinnedLink::from_pin(e.ok()?.path()).ok())
            .filter_map(|pinned| FdLink::from(pinned).info().ok().map(|info| (info.id(), info.program_id())))
            .collect()
    }
}

/// The ids of the BPF programs loaded in the kernel now (volguard's and any other's).
pub fn loaded_program_ids() -> HashSet<u32> {
    loaded_programs().filter_map(|p| p.ok()).map(|p| p.id()).collect()
}

/// Waits until none of the links `ids` (link id, program id) nor their programs is in the
/// kernel any more: a link's id goes before its program is detached, the program's once
/// it is.
fn wait_for_detach(ids: &[(u32, u32)]) {
    let started = Instant::now();
    loop {
        let links: HashSet<u32> = loaded_links().filter_map(|l| l.ok().map(|info| info.id())).collect();
        let programs: HashSet<u32> = loaded_programs().filter_map(|p| p.ok().map(|info| info.id())).collect();
        let left = ids.iter().filter(|(link, program)| links.contains(link) || programs.contains(program)).count();
        if left == 0 {
            info!("{} links and their programs detached in {:.1} s", ids.len(), started.elapsed().as_secs_f64());
            return;
        }
        if started.elapsed() >= DETACH_LIMIT {
            warn!("{left} of {} unpinned links still attached after {} s", ids.len(), DETACH_LIMIT.as_secs());
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
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
        warn!(
            "mounting bpffs on {BPFFS}: the node has none there, so the pins live as long as this mount namespace \
             (in a container, as long as the pod): mount bpffs on the node (systemd does) to keep enforcement \
             across agent restarts"
        );
        nix::mount::mount(Some("bpf"), BPFFS, Some("bpf"), nix::mount::MsFlags::empty(), None::<&str>)
            .map_err(|e| io_error("mounting bpffs on", Path::new(BPFFS))(e.into()))?;
        return Ok(());
    }
    Err(PinError::NotBpffs { path: path.display().to_string() })
}

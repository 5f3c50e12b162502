//! Where the CSI node plugins on this node listen: the kubelet plugin-registration
//! sockets (`<root>/plugins_registry`, each asked for its driver's endpoint), the
//! conventional `<root>/plugins/<dir>/csi.sock`, and sockets named explicitly. Only
//! directory listings here; the gRPC calls are in `client`.

use std::{
    collections::BTreeSet,
    os::unix::fs::FileTypeExt,
    path::{Path, PathBuf},
};

use serde::Serialize;

/// Kubelet's plugin watcher directory under its root.
pub const REGISTRY_DIR: &str = "plugins_registry";
/// The conventional plugin socket directory under kubelet's root.
pub const PLUGINS_DIR: &str = "plugins";
/// The conventional socket name in a plugin directory.
pub const CSI_SOCKET: &str = "csi.sock";
/// `PluginInfo.type` of CSI drivers (device and DRA plugins register in the same place).
pub const CSI_PLUGIN_TYPE: &str = "CSIPlugin";

/// How a driver was found; a driver can be found several ways.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// A registration socket in `plugins_registry` named it and its endpoint.
    Registration,
    /// `<root>/plugins/<dir>/csi.sock`.
    Conventional,
    /// Given on the command line or in the options.
    Explicit,
    /// Named in this node's CSINode.
    CsiNode,
}

impl Source {
    /// How a person would say it ("found by ...").
    pub fn describe(self) -> &'static str {
        match self {
            Self::Registration => "its kubelet registration socket",
            Self::Conventional => "its socket under plugins/",
            Self::Explicit => "--csi-socket",
            Self::CsiNode => "this node's CSINode",
        }
    }
}

/// The registration sockets kubelet would consider: entries of `plugins_registry` that
/// are sockets and not dotfiles (kubelet's plugin watcher skips both), sorted.
pub fn registration_sockets(kubelet_root: &Path) -> Vec<PathBuf> {
    sockets_in(&kubelet_root.join(REGISTRY_DIR))
}

/// `<root>/plugins/*/csi.sock` that exist and are sockets, sorted.
pub fn conventional_sockets(kubelet_root: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(kubelet_root.join(PLUGINS_DIR)) else { return Vec::new() };
    let mut found: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path().join(CSI_SOCKET))
        .filter(|p| is_socket(p))
        .collect();
    found.sort();
    found
}

/// Every socket path discovery looks at, for noticing when one appears or disappears.
pub fn socket_set(kubelet_root: &Path, extra: &[PathBuf]) -> BTreeSet<PathBuf> {
    let mut set: BTreeSet<PathBuf> = registration_sockets(kubelet_root).into_iter().collect();
    set.extend(conventional_sockets(kubelet_root));
    set.extend(extra.iter().filter(|p| is_socket(p)).cloned());
    set
}

/// The driver name a registrar's socket file suggests (`<driver>-reg.sock`), for naming a
/// registration socket that does not answer.
pub fn name_from_registration_socket(socket: &Path) -> String {
    let file = socket.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
    file.strip_suffix("-reg.sock").or_else(|| file.strip_suffix(".sock")).unwrap_or(&file).to_owned()
}

/// The `<dir>` of a conventional `<root>/plugins/<dir>/csi.sock`.
pub fn conventional_dir_name(kubelet_root: &Path, socket: &Path) -> Option<String> {
    let rest = socket.strip_prefix(kubelet_root.join(PLUGINS_DIR)).ok()?;
    let mut parts = rest.components();
    let dir = parts.next()?.as_os_str().to_str()?.to_owned();
    (parts.next()?.as_os_str() == CSI_SOCKET && parts.next().is_none()).then_some(dir)
}

pub fn is_socket(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_socket())
}

fn sockets_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut found: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        // DirEntry::file_type does not follow symlinks; kubelet stats the path (follows).
        .filter(|e| is_socket(&e.path()))
        .map(|e| e.path())
        .collect();
    found.sort();
    found
}

#[cfg(test)]
mod tests {
    use std::os::unix::net::UnixListener;

    use super::*;

    #[test]
    fn registry_skips_dotfiles_and_non_sockets() {
        let root = tempfile::tempdir().unwrap();
        let registry = root.path().join(REGISTRY_DIR);
        std::fs::create_dir_all(&registry).unwrap();
        let _a = UnixListener::bind(registry.join("a.example.com-reg.sock")).unwrap();
        let _hidden = UnixListener::bind(registry.join(".hidden-reg.sock")).unwrap();
        std::fs::write(registry.join("plain-file.sock"), "").unwrap();
        let plugin = root.path().join(PLUGINS_DIR).join("b.example.com");
        std::fs::create_dir_all(&plugin).unwrap();
        let _b = UnixListener::bind(plugin.join(CSI_SOCKET)).unwrap();
        std::fs::create_dir_all(root.path().join(PLUGINS_DIR).join("kubernetes.io/csi")).unwrap();

        assert_eq!(registration_sockets(root.path()), [registry.join("a.example.com-reg.sock")]);
        assert_eq!(conventional_sockets(root.path()), [plugin.join(CSI_SOCKET)]);
        assert_eq!(socket_set(root.path(), &[root.path().join("missing.sock")]).len(), 2);
        assert_eq!(conventional_dir_name(root.path(), &plugin.join(CSI_SOCKET)).as_deref(), Some("b.example.com"));
    }

    #[test]
    fn names_from_registration_socket_files() {
        assert_eq!(name_from_registration_socket(Path::new("/r/hostpath.csi.k8s.io-reg.sock")), "hostpath.csi.k8s.io");
        assert_eq!(name_from_registration_socket(Path::new("/r/other.sock")), "other");
    }

    #[test]
    fn a_missing_root_finds_nothing() {
        assert!(socket_set(Path::new("/nonexistent/volguard"), &[]).is_empty());
    }
}

//! Whose mount namespace the mount table is. Publishes are read from `--mountinfo` (by
//! default PID 1's, the host's: kubelet and Bidirectional CSI drivers publish there), and
//! an owner whose target is missing from it is released. Run in another namespace, the
//! agent sees its own and its neighbours' mounts through events, but not in that table
//! unless they propagate there: that is said at start-up and in every release it causes.

use std::path::Path;

use tracing::{info, warn};

use crate::sys::mountns::{OWN_NAMESPACE, namespace_inode, namespace_of};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TableNamespace {
    /// `(table's, agent's)` namespace inodes, when they differ.
    differs: Option<(u64, u64)>,
}

impl TableNamespace {
    /// Compares the table's namespace with the agent's, and says so when they differ.
    pub fn check(mountinfo: &Path) -> Self {
        let table_ns = namespace_of(mountinfo);
        let (table, own) = match (namespace_inode(&table_ns), namespace_inode(Path::new(OWN_NAMESPACE))) {
            (Ok(table), Ok(own)) => (table, own),
            (Err(e), _) | (_, Err(e)) => {
                warn!("cannot tell whose mount namespace {} is ({e})", mountinfo.display());
                return Self::default();
            }
        };
        if table == own {
            return Self::default();
        }
        info!(
            "the mount table {} is mount namespace {table}'s ({}); the agent runs in mount namespace {own}. \
             Publishes are reconciled against that table: a publish made where it does not propagate into that \
             namespace is missing there, and its owner is released after two passes (--mountinfo \
             /proc/self/mountinfo reads the agent's own)",
            mountinfo.display(),
            table_ns.display()
        );
        Self { differs: Some((table, own)) }
    }

    /// Appended to a release the table caused: the likely cause when the namespaces differ.
    pub fn why_missing(&self) -> String {
        match self.differs {
            None => " (its unmount was not seen)".into(),
            Some((table, own)) => format!(
                " (its unmount was not seen, or it never reached that table: the table is mount namespace \
                 {table}'s and the agent runs in {own})"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_own_table_needs_no_excuse_and_another_namespaces_table_is_named() {
        let own = TableNamespace::check(Path::new("/proc/self/mountinfo"));
        assert_eq!(own, TableNamespace::default());
        assert_eq!(own.why_missing(), " (its unmount was not seen)");
        let other = TableNamespace { differs: Some((1, 2)) };
        assert!(other.why_missing().contains("mount namespace 1's and the agent runs in 2"));
    }
}

//! volguard's userspace agent: loads the eBPF programs, decodes what they report, keeps
//! the node model, enforces single-pod volumes, and tells the world (metrics, debug API,
//! Events).
//!
//! # Layers
//!
//! Each folder is one layer; the table lists them from the bottom up, and folders in one
//! row are peers. A module may import from its own folder and from rows above its own,
//! never from a peer or a row below; the files of one folder never import each other in
//! a cycle; only `kernel` imports aya. `cargo xtask layers` (part of `cargo xtask test`)
//! reads this table and checks the three rules.
//!
//! | layer              | holds                                                          |
//! |--------------------|----------------------------------------------------------------|
//! | `sys`, `node_files` | private mount namespaces, signals and low-priority background work; readers of kubelet's on-disk layout, `vol_data.json`, mountinfo, cgroup paths |
//! | `kernel`           | the kernel boundary: load, attach, pins, maps, ring buffer, counters, probes |
//! | `facts`            | pods, PVs, PVCs, CSI objects: from the Kubernetes API or an inventory file |
//! | `model`            | the node model: publishes, single-pod owners, findings, conflicts, storage operations |
//! | `enforce`, `guard` | policy: the mode, userspace ownership, quarantine; the guard of owned volumes' files where no kernel hook refuses (fanotify reporters) |
//! | `csi`              | asking CSI drivers and judging what they say                   |
//! | `outputs`          | metrics, the debug API and the state it serves, Kubernetes Events, one-line renderings |
//! | `agent`, `cli`     | `volguard run`'s event loop; the commands for people           |
//! | `demo`             | `volguard demo`: the whole story on a bare host                |

pub mod agent;
pub mod cli;
pub mod csi;
pub mod demo;
pub mod enforce;
pub mod facts;
pub mod guard;
pub mod kernel;
pub mod model;
pub mod node_files;
pub mod outputs;
pub mod sys;

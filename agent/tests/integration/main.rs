//! volguard's integration tests: one binary (linking the agent once), one module per area,
//! so a test's path names its area (`host_trace::bind_mount_is_traced_with_every_field`)
//! and `cargo test -p volguard --test integration host_trace::` runs one area.
//!
//! - no root needed: `csi_driver` (CSI checks against stand-in drivers), `k8s_fake_api`
//!   (the Kubernetes source against a fake API server), `k8s_events` (conflicts become
//!   Events on it), `k8s_secure_metrics` (HTTPS
//!   `/metrics` behind token and access reviews asked of the fake API server),
//!   `fixtures_real_world` (published real-node samples in `agent/tests/fixtures/`);
//! - `host_*` (root; each says why it skips without): the real kernel and a real agent,
//!   mounts only in private mount namespaces; `host_trace`, `host_mount_api`,
//!   `host_node_model`, `host_demo`, `host_out_of_band`, `host_hostile`, `host_quarantine` and
//!   `host_trace_backend` run again in the VM (the tracing ones once per tracing backend);
//!   `host_fanotify` (Linux 6.15+) checks the mount-notification backend, which auto
//!   picks on a host that refuses trampolines; `host_cgroup_v1` (a hybrid host) tells a
//!   pod placed in cgroup v1 alone from the node's processes; tests about what only a traced syscall
//!   tells (its caller, its duration, the ring buffer) force a syscall backend
//!   ([`support::kubelet::syscall_backend`]);
//! - `k8s_scale_bench` (ignored; root): the agent's memory with a large cluster behind a
//!   fake API server, run by `cargo xtask bench`;
//! - `syscall_bench` (ignored; root): what the agent costs mount syscalls and unrelated
//!   syscalls, per tracing backend, run by `cargo xtask bench` on the host and in the VM;
//!   `hook_floor_bench` (ignored; BPF LSM): the `file_open` hook's own cost, in the VM;
//!   `owner_work_bench` (ignored; root): what the guard costs real work (unpacking a tree,
//!   a database, a stream) by the owner in its volume and outside any volume, on the host;
//! - `vm_*` (ignored here): BPF LSM, which this host's kernel refuses, and (`vm_floor`) a
//!   kernel below the floor; `cargo xtask vm-test` and `cargo xtask bench` run them in a
//!   VM, selected by module path.
//!
//! The areas share one process, so nothing here is process-wide: each test makes its own
//! temporary directories, mount-namespace threads ([`support::kubelet::MountNs`],
//! `run_in_private_mount_ns`), pin directory ([`support::kubelet::pin_root`]: a label no
//! other test uses, and the pid), listeners on port 0 and loaded eBPF objects; no test sets
//! an environment variable, the working directory, a signal handler or a global tracing
//! subscriber (the agent processes the tests start do, in their own processes).

mod support;

mod csi_driver;
mod fixtures_real_world;
mod hook_floor_bench;
mod host_busy_node;
mod host_cgroup_v1;
mod host_change_reports;
mod host_demo;
mod host_device_mounts;
mod host_fanotify;
mod host_hostile;
mod host_kubernetes;
mod host_mask_lifecycle;
mod host_mount_api;
mod host_namespace_reuse;
mod host_node_model;
mod host_open_reports;
mod host_out_of_band;
mod host_overflow;
mod host_prometheus;
mod host_quarantine;
mod host_trace;
mod host_trace_backend;
mod k8s_events;
mod k8s_fake_api;
mod k8s_scale_bench;
mod k8s_secure_metrics;
mod owner_work_bench;
mod syscall_bench;
mod vm_enforce;
mod vm_floor;
mod vm_lsm;
mod vm_open_guard;

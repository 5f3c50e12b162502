//! What the areas share: root checks, the agent's HTTP client, scratch directories, the
//! LSM list, and a tracer recording real eBPF events; `kubelet` (a fake kubelet tree, a
//! private mount namespace, a real `volguard run`) and `fake_api` (a fake Kubernetes API
//! server, over `tls` with HTTP/2 where asked).

pub mod block_device;
pub mod bpf_programs;
pub mod csi_standin;
pub mod fake_api;
pub mod kubelet;
pub mod pod_cgroup;
pub mod pod_process;
pub mod ready_line;
pub mod stories;
pub mod stuck;
pub mod tls;
pub mod volume_changes;

use std::{fs, os::unix::fs::MetadataExt, path::PathBuf, time::Duration};

use volguard::{
    cli::client,
    kernel::decode::{Call, Event, LsmConflict, Record},
    kernel::{
        loader::LoadedObject,
        reader::EventReader,
        trace_backend::{self, BackendChoice},
    },
};

/// Set by `cargo xtask test`: a root test may not skip itself for want of root.
pub const REQUIRE_ROOT: &str = "VOLGUARD_REQUIRE_ROOT_TESTS";

/// True when running as root. Otherwise fails the test where the harness demands root
/// tests (or under CI), else skips it visibly (see `volguard::sys::test_skip`).
pub fn have_root(test: &str) -> bool {
    assert!(
        nix::unistd::geteuid().is_root() || std::env::var_os(REQUIRE_ROOT).is_none(),
        "{test}: needs root but {REQUIRE_ROOT} is set"
    );
    volguard::sys::test_skip::have_root(test)
}

pub use volguard::sys::test_skip::skip;

/// `op` tried again for up to a second while it fails with EBUSY.
pub fn retry_while_busy(op: impl Fn() -> nix::Result<()>) -> nix::Result<()> {
    for _ in 0..20 {
        match op() {
            Err(nix::errno::Errno::EBUSY) => std::thread::sleep(Duration::from_millis(50)),
            done => return done,
        }
    }
    op()
}

/// How long a test's GET may wait for the agent (the VM is slow).
pub const HTTP_TIMEOUT: Duration = Duration::from_secs(10);

/// A GET against `address` (`ip:port`, as the agent logs its listeners) with the agent's
/// own client; (status, body). Any failure fails the test.
pub fn http_get(address: &str, path: &str) -> (u16, String) {
    let socket = address.parse().unwrap_or_else(|e| panic!("{address} is no ip:port: {e}"));
    let response = client::get(socket, path, HTTP_TIMEOUT).unwrap_or_else(|e| panic!("GET {path}: {e}"));
    (response.status, response.body)
}

/// Creates `root/<name>` for each name and returns the paths.
pub fn make_dirs<const N: usize>(root: &std::path::Path, names: [&str; N]) -> [PathBuf; N] {
    names.map(|n| {
        let d = root.join(n);
        fs::create_dir_all(&d).unwrap();
        d
    })
}

/// Whether `bpf` is in the kernel's active LSM list (securityfs must be mounted).
/// How this boot's agents refuse in the kernel (`bpf_lsm`, `fmod_ret`) or `none`: the VM
/// boot's compatibility row says it (`VOLGUARD_EXPECT_HOOKS`); elsewhere BPF LSM where `bpf`
/// is in `lsm=`, else none.
pub fn expected_security_hooks() -> String {
    std::env::var("VOLGUARD_EXPECT_HOOKS")
        .unwrap_or_else(|_| if bpf_in_lsm_list() { "bpf_lsm" } else { "none" }.to_owned())
}

/// Whether an agent in auto mode would refuse in the kernel here: the probes it makes, with
/// the security hooks its environment allows (`VOLGUARD_SECURITY_HOOKS`).
pub fn agents_refuse_here() -> bool {
    use volguard::{enforce::HooksChoice, kernel::lsm_probe};
    let choice = match std::env::var("VOLGUARD_SECURITY_HOOKS").as_deref() {
        Ok("bpf-lsm") => HooksChoice::BpfLsm,
        Ok("fmod-ret") => HooksChoice::FModRet,
        _ => HooksChoice::Auto,
    };
    choice.candidates().iter().any(|via| {
        let mut object = volguard::kernel::loader::LoadedObject::load().unwrap();
        lsm_probe::probe(&mut object, *via).unwrap().status == lsm_probe::LsmStatus::Active
    })
}

/// Whether this boot's agents refuse in the kernel (BPF LSM or fmod_ret).
pub fn kernel_refuses() -> bool {
    expected_security_hooks() != "none"
}

pub fn bpf_in_lsm_list() -> bool {
    fs::read_to_string(volguard::kernel::lsm_probe::LSM_LIST)
        .expect("securityfs mounted")
        .trim()
        .split(',')
        .any(|l| l == "bpf")
}

/// The cgroup v2 id (inode of the cgroup directory) of this process.
pub fn own_cgroup_id() -> u64 {
    let cgroups = fs::read_to_string("/proc/self/cgroup").unwrap();
    let path = cgroups.lines().find_map(|l| l.strip_prefix("0::")).expect("a cgroup v2 line in /proc/self/cgroup");
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let root = mountinfo
        .lines()
        .find_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            right.starts_with("cgroup2 ").then(|| left.split(' ').nth(4).map(PathBuf::from)).flatten()
        })
        .expect("cgroup2 mounted");
    fs::metadata(root.join(path.trim_start_matches('/'))).unwrap().ino()
}

/// Forces the tracing backend of the tests' tracers and of the agents they start (the
/// agent reads it as `--trace-backend`); `cargo xtask vm-test` runs areas once per backend.
pub const TRACE_BACKEND_ENV: &str = "VOLGUARD_TRACE_BACKEND";

/// The backend the harness asked for (`auto` when it did not).
pub fn trace_backend_choice() -> BackendChoice {
    use clap::ValueEnum as _;
    std::env::var(TRACE_BACKEND_ENV)
        .map_or(BackendChoice::Auto, |v| BackendChoice::from_str(&v, true).expect("a --trace-backend value"))
}

/// Loads the object and attaches the tracing programs (of the backend the harness chose).
pub fn tracer() -> (LoadedObject, Recorder) {
    tracer_with(LoadedObject::load().expect("load the embedded eBPF object"))
}

pub fn tracer_with(mut ebpf: LoadedObject) -> (LoadedObject, Recorder) {
    attach_syscall_backend(&mut ebpf);
    let reader = EventReader::new(&mut ebpf).unwrap();
    (ebpf, Recorder::new(reader))
}

/// A tracer set up as the agent's (records of mounts outside `kubelet_root` do not wake
/// the reader; none does where `kernel_decides` conflicts), whose timed drain of such
/// records comes only every `lazy_drain`.
pub fn tracer_waking_for(
    kubelet_root: &std::path::Path,
    kernel_decides: bool,
    lazy_drain: Duration,
) -> (LoadedObject, Recorder) {
    let mut ebpf = LoadedObject::load().expect("load the embedded eBPF object");
    volguard::kernel::wakeup::set_wakeup_filter(&mut ebpf, kubelet_root, kernel_decides).unwrap();
    attach_syscall_backend(&mut ebpf);
    let reader = EventReader::with_lazy_drain(&mut ebpf, lazy_drain).unwrap();
    (ebpf, Recorder::new(reader))
}

/// Attaches the tracing programs of the syscall backend the harness chose.
fn attach_syscall_backend(ebpf: &mut LoadedObject) {
    let tracing = trace_backend::choose_syscall_backend(trace_backend_choice()).expect("a syscall tracing backend");
    ebpf.attach(&tracing.hooks()).expect("attach the tracing programs");
}

/// Keeps every event read so far, so a test can wait for several in any order.
pub struct Recorder {
    reader: EventReader,
    seen: Vec<Event>,
    conflicts: Vec<LsmConflict>,
}

impl Recorder {
    pub fn new(reader: EventReader) -> Self {
        Self { reader, seen: Vec::new(), conflicts: Vec::new() }
    }

    /// The first event matching `want`, reading more for up to 5 s if needed.
    pub async fn wait_for(&mut self, want: impl Fn(&Event) -> bool) -> Event {
        self.wait_for_n(1, want).await.remove(0)
    }

    /// The first `n` events matching `want`, in arrival order.
    pub async fn wait_for_n(&mut self, n: usize, want: impl Fn(&Event) -> bool) -> Vec<Event> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            let found: Vec<Event> = self.seen.iter().filter(|e| want(e)).take(n).cloned().collect();
            if found.len() == n {
                return found;
            }
            let batch = self.read_more();
            let got = found.len();
            tokio::time::timeout_at(deadline, batch)
                .await
                .unwrap_or_else(|_| panic!("{n} matching events within 5 s, saw {got}"))
                .unwrap();
        }
    }

    /// Reads until nothing arrives for `quiet`; returns how many events were read.
    pub async fn drain(&mut self, quiet: Duration) -> usize {
        let before = self.seen.len();
        while let Ok(batch) = tokio::time::timeout(quiet, self.read_more()).await {
            batch.unwrap();
        }
        self.seen.len() - before
    }

    pub fn seen(&self) -> &[Event] {
        &self.seen
    }

    async fn read_more(&mut self) -> std::io::Result<usize> {
        let (seen, conflicts) = (&mut self.seen, &mut self.conflicts);
        self.reader
            .next_batch(|record| match record.expect("every record decodes") {
                Record::Syscall(event) => seen.push(event),
                Record::Conflict(conflict) => conflicts.push(conflict),
            })
            .await
    }
}

/// Matches a mount(2) onto `target`.
pub fn mount_onto(target: &std::path::Path) -> impl Fn(&Event) -> bool {
    let want = std::os::unix::ffi::OsStrExt::as_bytes(target.as_os_str()).to_vec();
    move |e| matches!(&e.call, Call::Mount { target, .. } if target.as_bytes() == want)
}

/// `path` as the NUL-terminated string a raw syscall takes (made before a fork).
pub fn cstr(path: &std::path::Path) -> std::ffi::CString {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap()
}

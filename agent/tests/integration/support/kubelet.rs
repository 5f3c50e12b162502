//! A fake kubelet tree, a persistent private mount namespace to publish in, and a real
//! `volguard run` process, for the enforcement tests.

use std::{
    io::{BufRead, BufReader},
    os::unix::ffi::OsStrExt,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
        mpsc::{self, Sender},
    },
    time::{Duration, Instant},
};

use nix::{
    errno::Errno,
    mount::{MntFlags, MsFlags, mount, umount2},
    sched::{CloneFlags, unshare},
};
use volguard_common::mount_api::{
    AT_FDCWD, FSCONFIG_CMD_CREATE, FSMOUNT_CLOEXEC, FSOPEN_CLOEXEC, MOVE_MOUNT_F_EMPTY_PATH, OPEN_TREE_CLOEXEC,
    OPEN_TREE_CLONE,
};

use super::cstr;

/// `<tmp>/kubelet` laid out as kubelet does, and volume contents under `<tmp>/volumes`.
pub struct KubeletTree {
    pub tmp: tempfile::TempDir,
}

impl KubeletTree {
    pub fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("kubelet")).unwrap();
        Self { tmp }
    }

    pub fn root(&self) -> PathBuf {
        self.tmp.path().join("kubelet")
    }

    /// `<root>/pods/<pod>/volumes/kubernetes.io~csi/<volume>/mount`, created.
    pub fn publish_dir(&self, pod: &str, volume: &str) -> PathBuf {
        let dir = self.root().join(format!("pods/{pod}/volumes/kubernetes.io~csi/{volume}/mount"));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// `<root>/plugins/kubernetes.io/csi/volumeDevices/publish/<volume>/<pod>`, an empty file.
    pub fn block_publish_file(&self, pod: &str, volume: &str) -> PathBuf {
        let dir = self.root().join(format!("plugins/kubernetes.io/csi/volumeDevices/publish/{volume}"));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join(pod);
        std::fs::write(&file, b"").unwrap();
        file
    }

    /// A directory standing for the volume's filesystem, holding a `marker` file.
    pub fn volume(&self, name: &str) -> PathBuf {
        let dir = self.tmp.path().join("volumes").join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("marker"), name).unwrap();
        dir
    }

    /// A volume with a filesystem of its own (a block volume's), staged: a new tmpfs at
    /// `<tmp>/<name>-staging`, mounted in `ns`, holding `data` with `contents`. Returns the
    /// staging and that file.
    pub fn staged_filesystem(&self, ns: &MountNs, name: &str, contents: &'static [u8]) -> (PathBuf, PathBuf) {
        let staging = self.tmp.path().join(format!("{name}-staging"));
        std::fs::create_dir_all(&staging).unwrap();
        ns.mount_tmpfs(&staging).unwrap();
        let file = staging.join("data");
        let written = file.clone();
        ns.run(move || std::fs::write(written, contents).unwrap());
        (staging, file)
    }
}

type Job = Box<dyn FnOnce() + Send>;

/// mount-utils' second step for a bind with the option `noexec`.
const BIND_REMOUNT_NOEXEC: MsFlags = MsFlags::MS_BIND.union(MsFlags::MS_REMOUNT).union(MsFlags::MS_NOEXEC);

/// A thread living in its own private mount namespace; mounts made through it stay until
/// it is dropped (a namespace's teardown is not an unmount, so tests unmount explicitly).
pub struct MountNs {
    jobs: Sender<Job>,
    pub tid: u32,
}

impl MountNs {
    pub fn new() -> Self {
        let (jobs, inbox) = mpsc::channel::<Job>();
        let (ready, started) = mpsc::channel();
        std::thread::Builder::new()
            .name("vg-test-ns".into())
            .spawn(move || {
                unshare(CloneFlags::CLONE_NEWNS).unwrap();
                mount(None::<&str>, "/", None::<&str>, MsFlags::MS_REC | MsFlags::MS_PRIVATE, None::<&str>).unwrap();
                ready.send(nix::unistd::gettid().as_raw() as u32).unwrap();
                for job in inbox {
                    job();
                }
            })
            .unwrap();
        Self { jobs, tid: started.recv().unwrap() }
    }

    /// Runs `f` in the namespace and returns its result.
    pub fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = mpsc::channel();
        self.jobs.send(Box::new(move || tx.send(f()).unwrap())).unwrap();
        match rx.recv_timeout(super::stuck::CALL_LIMIT) {
            Ok(result) => result,
            Err(e) => panic!(
                "a call in the test's mount namespace did not return ({e}); its thread:\n{}",
                super::stuck::kernel_stacks(std::process::id(), Some(self.tid))
            ),
        }
    }

    pub fn bind(&self, source: &Path, target: &Path) -> nix::Result<()> {
        let (s, t) = (source.to_path_buf(), target.to_path_buf());
        self.run(move || mount(Some(&s), &t, None::<&str>, MsFlags::MS_BIND, None::<&str>))
    }

    /// A bind onto `/proc/thread-self/fd/N` for an O_PATH fd of `target`, as runc does.
    pub fn bind_via_fd(&self, source: &Path, target: &Path) -> nix::Result<()> {
        let (s, t) = (source.to_path_buf(), target.to_path_buf());
        self.run(move || {
            let fd = nix::fcntl::open(
                &t,
                nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_CLOEXEC,
                nix::sys::stat::Mode::empty(),
            )?;
            let via = format!("/proc/thread-self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd));
            mount(Some(&s), via.as_str(), None::<&str>, MsFlags::MS_BIND, None::<&str>)
        })
    }

    /// A new (non-bind) tmpfs mount.
    pub fn mount_tmpfs(&self, target: &Path) -> nix::Result<()> {
        let t = target.to_path_buf();
        self.run(move || mount(Some("vg-test"), &t, Some("tmpfs"), MsFlags::empty(), None::<&str>))
    }

    /// Unmounts `target`, trying a busy mount again as kubelet's reconciler does: any path
    /// lookup through the mount (the agent's fanotify mark among them) makes umount(2) EBUSY.
    pub fn umount(&self, target: &Path) -> nix::Result<()> {
        let t = target.to_path_buf();
        self.run(move || super::retry_while_busy(|| umount2(&t, MntFlags::empty())))
    }

    /// Lazily detaches `target` and every mount below it with ONE umount2 call: the
    /// mounts below go without an unmount of their own (an unmount no event names).
    pub fn umount_detach(&self, target: &Path) -> nix::Result<()> {
        let t = target.to_path_buf();
        self.run(move || umount2(&t, MntFlags::MNT_DETACH))
    }

    /// A tmpfs mounted at `staging`, then moved onto `target` with `mount(2)`'s `MS_MOVE`;
    /// the move's result (the tmpfs is taken down again where the move failed).
    pub fn move_onto(&self, staging: &Path, target: &Path) -> nix::Result<()> {
        let (s, t) = (staging.to_path_buf(), target.to_path_buf());
        self.run(move || {
            mount(Some("vg-test"), &s, Some("tmpfs"), MsFlags::empty(), None::<&str>)?;
            let moved = mount(Some(&s), &t, None::<&str>, MsFlags::MS_MOVE, None::<&str>);
            if moved.is_err() {
                let _ = umount2(&s, MntFlags::MNT_DETACH);
            }
            moved
        })
    }

    /// A new tmpfs made with the new mount API (fsopen, fsconfig, fsmount), attached at
    /// `target` with move_mount; the move_mount result.
    pub fn fsmount_and_move(&self, target: &Path) -> nix::Result<()> {
        let t = cstr(target);
        self.run(move || {
            let null = std::ptr::null::<libc::c_char>();
            // SAFETY: raw syscalls with valid NUL-terminated strings; each fd is closed.
            unsafe {
                let fs = libc::syscall(libc::SYS_fsopen, c"tmpfs".as_ptr(), FSOPEN_CLOEXEC);
                if fs < 0 {
                    return Err(Errno::last());
                }
                let mnt = match libc::syscall(libc::SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, null, null, 0) {
                    0 => libc::syscall(libc::SYS_fsmount, fs, FSMOUNT_CLOEXEC, 0),
                    _ => -1,
                };
                let made = if mnt < 0 { Err(Errno::last()) } else { Ok(()) };
                libc::close(fs as i32);
                made?;
                let ret = libc::syscall(
                    libc::SYS_move_mount,
                    mnt,
                    c"".as_ptr(),
                    AT_FDCWD,
                    t.as_ptr(),
                    MOVE_MOUNT_F_EMPTY_PATH,
                );
                let result = if ret < 0 { Err(Errno::last()) } else { Ok(()) };
                libc::close(mnt as i32);
                result
            }
        })
    }

    /// open_tree(OPEN_TREE_CLONE) of `source`, then move_mount onto `target`, as runc does
    /// for id-mapped mounts; the move_mount result.
    pub fn clone_and_move(&self, source: &Path, target: &Path) -> nix::Result<()> {
        let (s, t) = (cstr(source), cstr(target));
        self.run(move || {
            // SAFETY: raw syscalls with valid NUL-terminated strings.
            unsafe {
                let fd = libc::syscall(libc::SYS_open_tree, AT_FDCWD, s.as_ptr(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
                if fd < 0 {
                    return Err(Errno::last());
                }
                let ret = libc::syscall(
                    libc::SYS_move_mount,
                    fd,
                    c"".as_ptr(),
                    AT_FDCWD,
                    t.as_ptr(),
                    MOVE_MOUNT_F_EMPTY_PATH,
                );
                let result = if ret < 0 { Err(Errno::last()) } else { Ok(()) };
                libc::close(fd as i32);
                result
            }
        })
    }

    /// This namespace's view of `target`: (filesystem type, mount source, read-only) of
    /// the top mount there, if it is a mount point.
    pub fn mount_at(&self, target: &Path) -> Option<(String, String, bool)> {
        self.mounts_at(target).pop()
    }

    /// Every mount stacked on `target`, bottom first: (filesystem type, mount source,
    /// read-only mount).
    pub fn mounts_at(&self, target: &Path) -> Vec<(String, String, bool)> {
        let t = target.as_os_str().as_bytes().to_vec();
        self.run(move || {
            let info = std::fs::read_to_string("/proc/thread-self/mountinfo").unwrap();
            info.lines()
                .filter_map(|line| {
                    let (left, right) = line.split_once(" - ")?;
                    let fields: Vec<&str> = left.split(' ').collect();
                    (fields.get(4)?.as_bytes() == t).then(|| {
                        let r: Vec<&str> = right.split(' ').collect();
                        (r[0].to_owned(), r[1].to_owned(), fields[5].split(',').any(|o| o == "ro"))
                    })
                })
                .collect()
        })
    }

    /// The per-mount options (mountinfo's sixth field) of the top mount on `target`.
    pub fn top_mount_options(&self, target: &Path) -> Option<Vec<String>> {
        let t = target.as_os_str().as_bytes().to_vec();
        self.run(move || {
            let info = std::fs::read_to_string("/proc/thread-self/mountinfo").unwrap();
            info.lines()
                .rev()
                .filter_map(|line| {
                    let fields: Vec<&str> = line.split(' ').collect();
                    (fields.get(4)?.as_bytes() == t).then(|| fields[5].split(',').map(str::to_owned).collect())
                })
                .next()
        })
    }

    /// The second step of a two-step publish (k8s.io/mount-utils with mount options):
    /// `mount -o bind,remount,<options>` on the target, here with `noexec` and not `ro`.
    pub fn bind_remount(&self, source: &Path, target: &Path) -> nix::Result<()> {
        let (s, t) = (source.to_path_buf(), target.to_path_buf());
        self.run(move || mount(Some(&s), &t, None::<&str>, BIND_REMOUNT_NOEXEC, None::<&str>))
    }

    /// Both steps back to back on this namespace's thread, `gap` apart.
    pub fn two_step_publish(&self, source: &Path, target: &Path, gap: Duration) -> (nix::Result<()>, nix::Result<()>) {
        let (s, t) = (source.to_path_buf(), target.to_path_buf());
        self.run(move || {
            let bind = mount(Some(&s), &t, None::<&str>, MsFlags::MS_BIND, None::<&str>);
            let started = Instant::now();
            while started.elapsed() < gap {
                std::hint::spin_loop();
            }
            (bind, mount(Some(&s), &t, None::<&str>, BIND_REMOUNT_NOEXEC, None::<&str>))
        })
    }

    /// A command run inside this namespace (as mount-utils runs mount(8)).
    pub fn command(&self, program: &str, args: &[&str]) -> std::process::Output {
        Command::new("nsenter")
            .arg(format!("--mount=/proc/{}/task/{}/ns/mnt", std::process::id(), self.tid))
            .arg(program)
            .args(args)
            .output()
            .unwrap()
    }

    /// This namespace's mount table, as a path the agent can read.
    pub fn mountinfo(&self) -> String {
        format!("/proc/{}/task/{}/mountinfo", std::process::id(), self.tid)
    }

    /// Writes a file under `dir` from inside the namespace.
    pub fn write_in(&self, dir: &Path) -> std::io::Result<()> {
        let f = dir.join("written-by-test");
        self.run(move || std::fs::write(f, b"x"))
    }

    pub fn read(&self, file: &Path) -> std::io::Result<String> {
        let f = file.to_path_buf();
        self.run(move || std::fs::read_to_string(f))
    }
}

/// Whether agents echo their stderr lines to the test's (see [`quiet_agents`]).
static ECHO_AGENT_LINES: AtomicBool = AtomicBool::new(true);

/// Agents started from now on in this process keep their stderr lines to themselves (kept
/// for `wait_for_line`, shown when a wait fails): for benchmarks, where each echoed line
/// goes out through the VM's emulated serial console.
pub fn quiet_agents() {
    ECHO_AGENT_LINES.store(false, Ordering::Relaxed);
}

/// A running `volguard run`, with every stderr line kept.
pub struct Agent {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    /// Set once its stderr closed (it exited): a line not printed by then never comes.
    stderr_closed: Arc<AtomicBool>,
}

/// The agent binary: `VOLGUARD_AGENT_BIN` where the harness put it (the VM), else the
/// one cargo built for these tests.
pub fn agent_binary() -> PathBuf {
    std::env::var_os("VOLGUARD_AGENT_BIN").map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_volguard")), PathBuf::from)
}

/// `--trace-backend` for a test of what only a traced syscall tells (its caller, its
/// duration, the ring buffer): the syscall backend the harness named, else tracepoints
/// (where the kernel refuses trampolines, auto picks fanotify, which tells none of it).
pub fn syscall_backend() -> [&'static str; 2] {
    match std::env::var(super::TRACE_BACKEND_ENV).as_deref() {
        Ok("trampolines") => ["--trace-backend", "trampolines"],
        _ => ["--trace-backend", "tracepoints"],
    }
}

/// A bpffs pin directory of this test's own.
pub fn pin_root(test: &str) -> PathBuf {
    PathBuf::from(format!("/sys/fs/bpf/volguard-test-{test}-{}", std::process::id()))
}

impl Agent {
    /// Starts the agent reading `ns`'s mount table (where the test's publishes live).
    pub fn start_in(ns: &MountNs, kubelet_root: &Path, pin_root: &Path, single_pod: &[&str], extra: &[&str]) -> Self {
        Self::start_binary_in(&agent_binary(), ns, kubelet_root, pin_root, single_pod, extra)
    }

    /// As [`Agent::start_in`], in `mode` rather than auto.
    pub fn start_in_mode(ns: &MountNs, kubelet_root: &Path, pin_root: &Path, single_pod: &[&str], mode: &str) -> Self {
        let mountinfo = ns.mountinfo();
        Self::spawn(
            &agent_binary(),
            kubelet_root,
            pin_root,
            single_pod,
            mode,
            &["--mountinfo", mountinfo.as_str()],
            &[],
        )
    }

    /// As [`Agent::start_in`], with another build of the agent (the bench's base agent).
    pub fn start_binary_in(
        binary: &Path,
        ns: &MountNs,
        kubelet_root: &Path,
        pin_root: &Path,
        single_pod: &[&str],
        extra: &[&str],
    ) -> Self {
        let mountinfo = ns.mountinfo();
        let args: Vec<&str> = ["--mountinfo", mountinfo.as_str()].into_iter().chain(extra.iter().copied()).collect();
        Self::spawn(binary, kubelet_root, pin_root, single_pod, "auto", &args, &[])
    }

    /// Starts `volguard run` in `mode` with more arguments, and waits for its ready line.
    pub fn start_with(kubelet_root: &Path, pin_root: &Path, single_pod: &[&str], mode: &str, extra: &[&str]) -> Self {
        Self::start_with_env(kubelet_root, pin_root, single_pod, mode, extra, &[])
    }

    /// As [`Agent::start_with`], with extra environment variables.
    pub fn start_with_env(
        kubelet_root: &Path,
        pin_root: &Path,
        single_pod: &[&str],
        mode: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        Self::spawn(&agent_binary(), kubelet_root, pin_root, single_pod, mode, extra, env)
    }

    fn spawn(
        binary: &Path,
        kubelet_root: &Path,
        pin_root: &Path,
        single_pod: &[&str],
        mode: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        let mut cmd = Command::new(binary);
        cmd.envs(env.iter().copied());
        cmd.arg("run").arg("--kubelet-root").arg(kubelet_root).arg("--pin-root").arg(pin_root);
        cmd.args(["--mode", mode]).args(extra);
        // Tests run agents side by side: any free port, unless the test names one.
        for flag in ["--metrics-address", "--debug-address"] {
            if !extra.contains(&flag) {
                cmd.args([flag, "127.0.0.1:0"]);
            }
        }
        for volume in single_pod {
            cmd.args(["--single-pod-volume", volume]);
        }
        if !env.iter().any(|(name, _)| *name == "RUST_LOG") {
            cmd.env("RUST_LOG", "info");
        }
        cmd.env("NO_COLOR", "1").stdout(Stdio::null()).stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (sink, stderr) = (lines.clone(), child.stderr.take().unwrap());
        let stderr_closed = Arc::new(AtomicBool::new(false));
        let closed = stderr_closed.clone();
        let echo = ECHO_AGENT_LINES.load(Ordering::Relaxed);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if echo {
                    eprintln!("  agent| {line}");
                }
                sink.lock().unwrap().push(line);
            }
            closed.store(true, Ordering::Release);
        });
        let agent = Self { child, lines, stderr_closed };
        agent.wait_for_line("ready", |l| l.starts_with(volguard::agent::READY));
        // In a VM boot, an agent that refuses in the kernel does so the way the boot's row
        // says: an fmod_ret boot's enforce tests prove fmod_ret, not BPF LSM.
        let forced =
            std::env::var("VOLGUARD_SECURITY_HOOKS").ok().filter(|h| h == "fmod-ret").map(|_| "fmod_ret".into());
        if let Some(expected) = forced.or_else(|| std::env::var("VOLGUARD_EXPECT_HOOKS").ok()) {
            let hooks = agent.security_hooks();
            assert!(
                hooks == "none" || hooks == expected,
                "the agent refuses with {hooks}, the boot expects {expected}"
            );
        }
        agent
    }

    /// The first stderr line matching `want`, waiting up to 60 s (the VM is slow), or until
    /// the agent exits without it (a bad argument fails at once, with the agent's error).
    pub fn wait_for_line(&self, what: &str, want: impl Fn(&str) -> bool) -> String {
        self.wait_until(what, |lines| lines.iter().find(|l| want(l)).cloned())
    }

    /// What `found` finds in the lines so far, waiting as [`Self::wait_for_line`] does.
    fn wait_until(&self, what: &str, found: impl Fn(&[String]) -> Option<String>) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            // Read before the lines: a line printed just before the exit is still found.
            let exited = self.stderr_closed.load(Ordering::Acquire);
            if let Some(line) = found(&self.lines.lock().unwrap()) {
                return line;
            }
            let lines = || self.lines.lock().unwrap().clone();
            assert!(!exited, "the agent exited without printing {what}: {:#?}", lines());
            if Instant::now() >= deadline {
                let (lines, counters) = (lines(), super::stuck::kernel_counters(&lines()));
                panic!("agent never printed {what}: {lines:#?}\nits kernel counters:\n{counters}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The address a listener ended up on (`what` is "metrics" or "debug API").
    pub fn address(&self, what: &str) -> String {
        let prefix = format!("{what} on http://");
        let line = self.wait_for_line(what, |l| l.contains(&prefix));
        line.split(&prefix).nth(1).unwrap().trim().to_owned()
    }

    /// `name`'s value (a metric with its labels, as exposed) on the metrics listener; 0
    /// when absent.
    pub fn metric(&self, name: &str) -> f64 {
        let (_, text) = super::http_get(&self.address("metrics"), "/metrics");
        let value = text.lines().find_map(|l| l.strip_prefix(name)?.trim().parse().ok());
        value.unwrap_or_else(|| panic!("the agent exports no series {name} (a missing series is not 0):\n{text}"))
    }

    /// The sum of every series of the family `family` (0 where it has none yet: a labelled
    /// family before its first count is not in the exposition at all). The family must be
    /// one the agent registers (`volguard metrics-reference --names`): a renamed metric
    /// fails here instead of reading 0.
    pub fn metric_family_sum(&self, family: &str) -> f64 {
        self.metric_family_sum_where(family, "")
    }

    /// As [`Self::metric_family_sum`], over the series whose line contains `labels`.
    pub fn metric_family_sum_where(&self, family: &str, labels: &str) -> f64 {
        let names = Command::new(agent_binary()).args(["metrics-reference", "--names"]).output().unwrap();
        let names = String::from_utf8_lossy(&names.stdout);
        assert!(
            names.lines().any(|l| l.split(' ').next() == Some(family)),
            "the agent registers no metric {family}:\n{names}"
        );
        let (_, text) = super::http_get(&self.address("metrics"), "/metrics");
        let series = |l: &&str| l.strip_prefix(family).is_some_and(|rest| rest.starts_with(['{', ' ']));
        text.lines()
            .filter(series)
            .filter(|l| l.contains(labels))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// How many lines so far match `want`.
    pub fn count_lines(&self, want: impl Fn(&str) -> bool) -> usize {
        self.lines.lock().unwrap().iter().filter(|l| want(l)).count()
    }

    /// Waits until more than `seen` lines match `want`.
    pub fn wait_for_more_lines(&self, what: &str, seen: usize, want: impl Fn(&str) -> bool) {
        self.wait_until(what, |lines| (lines.iter().filter(|l| want(l)).count() > seen).then(String::new));
    }

    /// The first line matching `then` that comes after a line matching `first`.
    pub fn wait_for_line_after(&self, what: &str, first: impl Fn(&str) -> bool, then: impl Fn(&str) -> bool) -> String {
        self.wait_until(what, |lines| {
            let start = lines.iter().position(|l| first(l))?;
            lines[start + 1..].iter().find(|l| then(l)).cloned()
        })
    }

    /// The agent's resident set (VmRSS of /proc/<pid>/status), KiB.
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS in /proc/<pid>/status");
        line.split_whitespace().nth(1).and_then(|kib| kib.parse().ok()).expect("VmRSS in kB")
    }

    /// The agent's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn sigkill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// SIGTERM, then wait for a clean exit.
    pub fn stop(mut self) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), nix::sys::signal::Signal::SIGTERM)
            .unwrap();
        let (pid, child, lines) = (self.child.id(), &mut self.child, &self.lines);
        let status = super::stuck::poll_until(
            pid,
            "the agent, after SIGTERM",
            super::stuck::STOP_LIMIT,
            || child.try_wait().unwrap(),
            || format!("\nits lines: {:#?}", lines.lock().unwrap()),
        );
        assert!(status.success(), "agent exited with {status}: {:#?}", self.lines.lock().unwrap());
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `volguard uninstall` for `pin_root`.
pub fn uninstall(pin_root: &Path) {
    let status = Command::new(agent_binary()).arg("uninstall").arg("--pin-root").arg(pin_root).status().unwrap();
    assert!(status.success());
}

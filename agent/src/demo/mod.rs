//! `volguard demo`: the whole story on a bare host, no cluster. In a private mount
//! namespace (the host's mount table is never touched) it lays out a kubelet tree on a
//! tmpfs, writes an inventory, starts a stand-in CSI driver and the real agent, then plays
//! what a new user needs to see, and cleans up every mount and pin however it ends.

mod backup_pod;
mod standin;

use std::{
    io::{BufRead, BufReader},
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use nix::{
    errno::Errno,
    mount::{MntFlags, MsFlags, mount, umount2},
    sched::{CloneFlags, unshare},
};
use serde_json::Value;

use crate::{
    agent::READY,
    cli::{
        client,
        views::{self, View},
    },
    model::mounts::MASK_SOURCE,
    node_files::mount_table::MountTable,
};

/// The demo's node: two pods sharing an RWOP claim, two sharing an RWO one, and a backup
/// pod with no claim.
pub const INVENTORY: &str = "\
nodeName: demo-node
pods:
  - {uid: pod-a, namespace: shop, name: db-0, volumes: [{name: data, persistentVolumeClaim: data}]}
  - {uid: pod-b, namespace: shop, name: db-1, volumes: [{name: data, persistentVolumeClaim: data}]}
  - {uid: web-0, namespace: shop, name: web-0, volumes: [{name: cache, persistentVolumeClaim: cache}]}
  - {uid: web-1, namespace: shop, name: web-1, volumes: [{name: cache, persistentVolumeClaim: cache}]}
  - {uid: 0c3c2d5e-0000-4a6e-9f00-00000000b0c0, namespace: shop, name: backup-0, volumes: []}
  - {uid: 0c3c2d5e-0000-4a6e-9f00-00000000d0c0, namespace: shop, name: debug-0, volumes: []}
persistentVolumes:
  - {name: pv-data, accessModes: [ReadWriteOncePod], claimRef: shop/data, csi: {driver: demo.csi.volguard.io, volumeHandle: data-1}}
  - {name: pv-cache, accessModes: [ReadWriteOnce], claimRef: shop/cache, csi: {driver: demo.csi.volguard.io, volumeHandle: cache-1}}
persistentVolumeClaims:
  - {namespace: shop, name: data, accessModes: [ReadWriteOncePod], volumeName: pv-data}
  - {namespace: shop, name: cache, accessModes: [ReadWriteOnce], volumeName: pv-cache}
csiDrivers:
  - {name: demo.csi.volguard.io, attachRequired: false}
csiNode:
  drivers: [{name: demo.csi.volguard.io, nodeID: demo-node}]
";

const DRIVER: &str = "demo.csi.volguard.io";
const PIN_ROOT: &str = "/sys/fs/bpf/volguard-demo";
const STEPS: usize = 8;
/// The backup and debug pods' UIDs (their cgroups are named after them, as kubelet names
/// a pod's).
const BACKUP_UID: &str = "0c3c2d5e-0000-4a6e-9f00-00000000b0c0";
const DEBUG_UID: &str = "0c3c2d5e-0000-4a6e-9f00-00000000d0c0";

#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error("the demo needs root (it loads eBPF programs and mounts in a private namespace)")]
    NotRoot,
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{what}: {errno}")]
    Sys { what: String, errno: Errno },
    #[error("{0}")]
    Agent(String),
    #[error(transparent)]
    Cli(#[from] views::CliError),
    #[error("asking the agent's metrics listener: {0}")]
    Metrics(#[from] client::GetError),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> DemoError {
    let what = what.into();
    move |source| DemoError::Io { what, source }
}

fn sys(what: impl Into<String>) -> impl FnOnce(Errno) -> DemoError {
    let what = what.into();
    move |errno| DemoError::Sys { what, errno }
}

/// Runs the story. `agent` is the volguard binary to start; `hold` keeps the agent and its
/// API up at the end until Ctrl-C.
pub async fn run(agent: &Path, hold: bool) -> Result<(), DemoError> {
    if !nix::unistd::Uid::effective().is_root() {
        return Err(DemoError::NotRoot);
    }
    // Caught from here on: a Ctrl-C at any moment (even while the agent starts) must end
    // in the clean-up below, not in SIGINT's default of dying with mounts and pins left.
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .map_err(io("installing the Ctrl-C handler"))?;
    let stage = Stage::build()?;
    let mut show = Show::new();
    let story = async {
        let mut agent = stage.start_agent(agent)?;
        play(&stage, &mut agent, &mut show).await?;
        if hold {
            println!("\nThe agent keeps running. Try: volguard volumes --debug-address {}", agent.debug);
            println!(
                "or open http://{}/debug/volumes and http://{}/metrics. Ctrl-C to finish.",
                agent.debug, agent.metrics
            );
            // Until the Ctrl-C below ends the story (the agent is dropped with it).
            std::future::pending::<()>().await;
        }
        Ok::<_, DemoError>(agent)
    };
    let outcome = tokio::select! {
        outcome = story => outcome.map(drop),
        _ = interrupt.recv() => { println!("\nCtrl-C: stopping."); Ok(()) }
    };
    // The agent has stopped (its Drop, with the story); now undo the stage.
    drop(stage);
    println!(
        "Cleaned up: the agent stopped, its pins removed, every demo mount gone (they lived in the demo's own mount namespace)."
    );
    outcome
}

/// The private mount namespace and the simulated node; undone on drop.
struct Stage {
    dir: PathBuf,
}

impl Stage {
    fn build() -> Result<Self, DemoError> {
        // A mount namespace of our own, with no propagation back to the host.
        unshare(CloneFlags::CLONE_NEWNS).map_err(sys("creating a private mount namespace"))?;
        mount(None::<&str>, "/", None::<&str>, MsFlags::MS_REC | MsFlags::MS_PRIVATE, None::<&str>)
            .map_err(sys("making the mount namespace private"))?;
        let dir = PathBuf::from(format!("/tmp/volguard-demo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
        mount(Some("volguard-demo"), &dir, Some("tmpfs"), MsFlags::empty(), Some("size=16m"))
            .map_err(sys("mounting the demo's tmpfs"))?;
        let stage = Self { dir };
        for volume in ["pv-data", "pv-cache"] {
            let v = stage.volume(volume);
            std::fs::create_dir_all(&v).map_err(io("creating a volume"))?;
            std::fs::write(v.join("README"), format!("the contents of {volume}\n")).map_err(io("writing a volume"))?;
        }
        std::fs::write(stage.inventory(), INVENTORY).map_err(io("writing the inventory"))?;
        Ok(stage)
    }

    fn kubelet(&self) -> PathBuf {
        self.dir.join("kubelet")
    }

    fn inventory(&self) -> PathBuf {
        self.dir.join("inventory.yaml")
    }

    fn volume(&self, name: &str) -> PathBuf {
        self.dir.join("volumes").join(name)
    }

    /// kubelet's publish target for `volume` in `pod`, created as kubelet would.
    fn target(&self, pod: &str, volume: &str) -> Result<PathBuf, DemoError> {
        let t = self.kubelet().join(format!("pods/{pod}/volumes/kubernetes.io~csi/{volume}/mount"));
        std::fs::create_dir_all(&t).map_err(io("creating a publish target"))?;
        Ok(t)
    }

    /// NodePublishVolume, as a CSI driver does it: a bind mount onto the target.
    fn publish(&self, pod: &str, volume: &str) -> Result<Result<(), Errno>, DemoError> {
        let target = self.target(pod, volume)?;
        Ok(mount(Some(&self.volume(volume)), &target, None::<&str>, MsFlags::MS_BIND, None::<&str>))
    }

    fn start_agent(&self, binary: &Path) -> Result<RunningAgent, DemoError> {
        std::fs::create_dir_all(self.kubelet()).map_err(io("creating the kubelet root"))?;
        let socket = self.kubelet().join(format!("plugins/{DRIVER}/csi.sock"));
        standin::serve(&socket, standin::StandIn { name: DRIVER.into(), node_id: "demo-node".into() })
            .map_err(io("starting the stand-in CSI driver"))?;
        let mut command = Command::new(binary);
        // SAFETY: prctl is async-signal-safe. The agent is told to stop (SIGTERM: it
        // removes its pins) when the demo dies, even by SIGKILL, which runs no clean-up of
        // ours. The signal follows the thread that forks: the one that drives the demo.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut command, || {
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM).map_err(std::io::Error::from)
            });
        }
        let mut child = command
            .args(["run", "--kubelet-root"])
            .arg(self.kubelet())
            .arg("--inventory")
            .arg(self.inventory())
            .args(["--mountinfo", "/proc/self/mountinfo", "--pin-root", PIN_ROOT])
            .args(["--keep-enforcement-on-exit=false", "--reconcile-interval", "2s"])
            .args(["--metrics-address", "127.0.0.1:0", "--debug-address", "127.0.0.1:0"])
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(io(format!("starting {}", binary.display())))?;
        let lines = Arc::new(Mutex::new(Vec::new()));
        if let Some(stderr) = child.stderr.take() {
            let sink = lines.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    sink.lock().unwrap_or_else(|e| e.into_inner()).push(line);
                }
            });
        }
        let mut agent =
            RunningAgent { child, lines, metrics: UNSPECIFIED, debug: UNSPECIFIED, ready_line: String::new() };
        let ready = agent.wait_line("the agent to be ready", |l| l.starts_with(READY))?;
        agent.metrics = agent.address("metrics")?;
        agent.debug = agent.address("debug API")?;
        agent.ready_line = ready;
        Ok(agent)
    }
}

impl Drop for Stage {
    fn drop(&mut self) {
        let _ = umount2(&self.dir, MntFlags::MNT_DETACH);
        let _ = std::fs::remove_dir_all(&self.dir);
        // A backstop: the agent removes its pins when it stops; make sure they are gone.
        let _ = crate::kernel::pins::Pins::new(Path::new(PIN_ROOT)).uninstall();
    }
}

const UNSPECIFIED: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 0);

/// The agent child process; stopped (SIGTERM, then SIGKILL after 10 s) when dropped.
struct RunningAgent {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    metrics: SocketAddr,
    debug: SocketAddr,
    ready_line: String,
}

impl RunningAgent {
    fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Waits up to 60 s (the VM is slow) for a line; fails with the agent's last words.
    fn wait_line(&mut self, what: &str, want: impl Fn(&str) -> bool) -> Result<String, DemoError> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(line) = self.lines().into_iter().find(|l| want(l)) {
                return Ok(line);
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                let tail = self.lines().into_iter().rev().take(5).collect::<Vec<_>>().join("\n  ");
                return Err(DemoError::Agent(format!(
                    "the agent exited ({status}) while waiting for {what}:\n  {tail}"
                )));
            }
            if Instant::now() > deadline {
                return Err(DemoError::Agent(format!("timed out waiting for {what}")));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn address(&mut self, what: &str) -> Result<SocketAddr, DemoError> {
        let prefix = format!("{what} on http://");
        let line = self.wait_line(what, |l| l.contains(&prefix))?;
        let text = line.split(&prefix).nth(1).unwrap_or_default().trim();
        text.parse().map_err(|_| DemoError::Agent(format!("unexpected {what} address {text:?}")))
    }

    fn stop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline
            && nix::sys::wait::waitpid(pid, Some(nix::sys::wait::WaitPidFlag::WNOHANG))
                .is_ok_and(|s| s == nix::sys::wait::WaitStatus::StillAlive)
        {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
    }
}

impl Drop for RunningAgent {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Numbered, headed steps.
struct Show {
    step: usize,
}

impl Show {
    fn new() -> Self {
        Self { step: 0 }
    }

    fn step(&mut self, title: &str) {
        self.step += 1;
        println!("\n── {}/{STEPS}  {title}", self.step);
    }
}

fn say(text: &str) {
    for line in text.lines() {
        println!("   {line}");
    }
}

/// Polls the debug API until `check` accepts the answer (at most 15 s).
fn poll(debug: SocketAddr, path: &str, check: impl Fn(&Value) -> bool) -> Result<Value, DemoError> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        // A 404 while the view catches up (it refreshes once a second) means "not yet".
        let body = match views::fetch(debug, path) {
            Err(views::CliError::Http { status: 404, .. }) if Instant::now() < deadline => Value::Null,
            other => other?,
        };
        if check(&body) || Instant::now() > deadline {
            return Ok(body);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

async fn play(stage: &Stage, agent: &mut RunningAgent, show: &mut Show) -> Result<(), DemoError> {
    let mode = agent.ready_line.split("mode=").nth(1).unwrap_or("").to_owned();
    let enforce = mode.starts_with("enforce");
    introduce(stage, show, &mode, enforce);

    show.step("Pod shop/db-0 publishes pv-data (ReadWriteOncePod)");
    stage.publish("pod-a", "pv-data")?.map_err(sys("publishing pv-data into db-0"))?;
    let volume = poll(agent.debug, "/debug/volumes/pv-data", |b| b["volume"]["owner"] == "pod-a")?;
    say(&format!(
        "Mounted. The first publish claims the volume: owner = {} ({}).",
        volume["volume"]["owner"].as_str().unwrap_or("?"),
        if enforce { "claimed atomically in a kernel map" } else { "recorded by the agent" }
    ));

    show.step("Pod shop/db-1 publishes the same volume");
    let b_target = stage.target("pod-b", "pv-data")?;
    match stage.publish("pod-b", "pv-data")? {
        Err(Errno::EBUSY) => {
            say("mount(2) failed with EBUSY: refused in the kernel by the BPF LSM hook. Nothing was mounted.")
        }
        Err(other) => say(&format!("mount(2) failed with {other}")),
        Ok(()) => {
            let line = agent.wait_line("the quarantine", |l| l.contains("CONFLICT quarantined"))?;
            let micros = line.split('(').next_back().unwrap_or("").trim_end_matches(')');
            let table = MountTable::read(Path::new("/proc/self/mountinfo")).map_err(io("reading the mount table"))?;
            let masked =
                table.mounts.iter().rev().find(|m| m.mount_point == b_target).is_some_and(|m| m.fs_type == "tmpfs");
            say(&format!(
                "mount(2) succeeded (no LSM to refuse it), and the agent undid it in {micros}:\n\
                 the bind is detached and an empty read-only tmpfs ({MASK_SOURCE}) covers the target{}.\n\
                 db-1 sees no data from pv-data and cannot write to the node's disk through that path.",
                if masked { "" } else { " (mask not found!)" }
            ));
        }
    }
    let conflict = poll(agent.debug, "/debug/conflicts?limit=1", |b| b["conflicts"][0]["message"].is_string())?;
    say(&format!(
        "The explanation (a Warning Event on shop/db-1 with a Kubernetes API):\n  {}",
        conflict["conflicts"][0]["message"].as_str().unwrap_or("")
    ));

    show.step("Pod shop/backup-0 reaches db-0's volume without kubelet (a hostPath)");
    backup_pod_reads(stage, agent)?;

    show.step("Pod shop/debug-0 opens db-0's files with no mount of its own");
    debug_pod_reads(stage, agent, enforce)?;

    show.step("Pods shop/web-0 and shop/web-1 share pv-cache (ReadWriteOnce)");
    stage.publish("web-0", "pv-cache")?.map_err(sys("publishing pv-cache into web-0"))?;
    stage.publish("web-1", "pv-cache")?.map_err(sys("publishing pv-cache into web-1"))?;
    poll(agent.debug, "/debug/volumes/pv-cache", |b| {
        b["volume"]["published_to"].as_array().is_some_and(|p| p.len() == 2)
    })?;
    say("Both mounted: ReadWriteOnce lets pods on one node share a volume, and volguard leaves it alone.");

    show.step(&format!("The CSI check: {DRIVER}"));
    let csi = poll(agent.debug, "/debug/csi", |b| {
        b["csi"]["findings"]
            .as_array()
            .is_some_and(|f| f.iter().any(|f| f["check"] == "csi_rwop_not_enforced_by_driver"))
    })?;
    print!("{}", indent(&View::Csi.render(&csi, false)));
    say("The driver does not advertise SINGLE_NODE_MULTI_WRITER, so kubelet sends ReadWriteOncePod volumes as\n\
         SINGLE_NODE_WRITER, which the driver cannot tell from ReadWriteOnce: below kubelet, only volguard\n\
         stops a second pod on this node.");

    operator_views(agent, show)
}

/// What the stage holds and what the agent chose on this kernel.
fn introduce(stage: &Stage, show: &mut Show, mode: &str, enforce: bool) {
    show.step("A node without a cluster");
    say(&format!(
        "In a private mount namespace: a kubelet tree at {}, an inventory with four pods\n\
         (shop/db-0 and shop/db-1 share PVC shop/data, ReadWriteOncePod; shop/web-0 and shop/web-1\n\
         share PVC shop/cache, ReadWriteOnce), and a CSI driver {DRIVER} on a unix socket.\n\
         The agent started: mode={mode}",
        stage.kubelet().display()
    ));
    say(if enforce {
        "BPF LSM works on this kernel: a second pod's publish is refused in the kernel, before anything is mounted."
    } else {
        "No working BPF LSM here (see `volguard lsm-probe`): the agent quarantines instead — the second pod's\n\
         mount succeeds, and at its syscall exit the agent detaches it and masks the target read-only.\n\
         Boot with `bpf` in lsm= (or run `cargo xtask demo --vm`) to see the kernel refuse it."
    });
}

/// What an operator sees on the node: the CLI's views and a few metrics.
fn operator_views(agent: &RunningAgent, show: &mut Show) -> Result<(), DemoError> {
    show.step("What an operator sees on the node");
    for (command, view) in [
        ("volguard status", View::Status),
        ("volguard volumes", View::Volumes),
        ("volguard conflicts", View::Conflicts),
    ] {
        println!("   $ {command}");
        print!("{}", indent(&view.render(&views::fetch(agent.debug, view.path())?, false)));
    }
    println!("   $ curl -s http://{}/metrics   (a few lines)", agent.metrics);
    let metrics = fetch_text(agent.metrics, "/metrics")?;
    for line in metrics.lines().filter(|l| {
        l.starts_with("volguard_conflicts_total{")
            || l.starts_with("volguard_enforcement_mode{")
            || (l.starts_with("storage_operation_duration_seconds_count{") && l.contains("volume_mount"))
            || l.starts_with("volguard_single_pod_volumes{")
    }) {
        println!("     {line}");
    }
    println!(
        "   Debug API: http://{}/debug/volumes (and /debug/conflicts, /debug/mounts, /debug/csi, /debug/config)",
        agent.debug
    );
    Ok(())
}

/// A container of another pod binds db-0's publish target (what a hostPath on that
/// directory amounts to): kubelet never sees it; volguard knows the mount by what it shows
/// and takes it away.
fn backup_pod_reads(stage: &Stage, agent: &mut RunningAgent) -> Result<(), DemoError> {
    let Some(hierarchy) = crate::node_files::caller_pod::unified_root() else {
        say("No cgroup v2 hierarchy on this host: volguard reads a caller's pod from its cgroup v2 path, so the\n\
             backup pod cannot be told from the node here.");
        return Ok(());
    };
    let a_target = stage.target("pod-a", "pv-data")?;
    let pod = backup_pod::BackupPod::start(&hierarchy, BACKUP_UID, &stage.dir.join("backup-rootfs"), &a_target)
        .map_err(io("starting the backup pod's container"))?;
    say(&format!(
        "Its container (pid {}) has db-0's volume directory bound at {} — no NodePublishVolume, no kubelet check.",
        pod.pid(),
        backup_pod::MOUNT_POINT
    ));
    let line =
        agent.wait_line("the backup pod's access", |l| l.contains("CONFLICT detached") && l.contains(BACKUP_UID))?;
    let route = line.split("CONFLICT detached: a ").nth(1).and_then(|r| r.split(' ').next()).unwrap_or("?");
    let readme = format!("{}/README", backup_pod::MOUNT_POINT);
    let read = std::fs::read_to_string(pod.path(&readme));
    say(&format!(
        "volguard knows a mount by what it shows (its filesystem and directory), not by where it lands: the\n\
         mount reached pv-data, owned by db-0, so it was detached in the backup pod's namespace (route `{route}`).\n\
         backup-0 {} — and gets a SinglePodVolumeAccessDetached Event with a Kubernetes API.",
        match &read {
            Err(_) => format!("finds nothing at {readme}"),
            Ok(text) => format!("STILL READS {readme}: {:?}", text.trim()),
        }
    ));
    if read.is_ok() {
        return Err(DemoError::Agent(format!("the backup pod still reads db-0's data at {readme}")));
    }
    Ok(())
}

/// A `kubectl debug node/…` pod (the node's `/` at `/host`) opens db-0's file by its node
/// path, under kubelet's publish target: no mount, no mount call, nothing for a mount hook
/// to see. The open guard refuses it (BPF LSM) or reports it (no BPF LSM).
fn debug_pod_reads(stage: &Stage, agent: &mut RunningAgent, enforce: bool) -> Result<(), DemoError> {
    let Some(hierarchy) = crate::node_files::caller_pod::unified_root() else {
        say("No cgroup v2 hierarchy on this host: the debug pod cannot be told from the node here.");
        return Ok(());
    };
    let file = stage.target("pod-a", "pv-data")?.join("README");
    let (pod, opened) =
        backup_pod::DebugPod::open(&hierarchy, DEBUG_UID, &file).map_err(io("starting the debug pod's process"))?;
    say(&format!(
        "Its process (pid {}) opens {} — a path on the node, under db-0's publish target.",
        pod.pid(),
        file.display()
    ));
    match (opened, enforce) {
        (Err(Errno::EACCES), true) => {
            agent.wait_line("the refused open", |l| l.contains("file_open") && l.contains(DEBUG_UID))?;
            say("open(2) failed with EACCES: the BPF LSM hook on file_open knows the file belongs to pv-data,\n\
                 owned by db-0, and refuses every other pod's open, whatever path, mount or namespace led\n\
                 there (/proc/<pid>/root, nsenter, a hostPath on a parent directory). A\n\
                 SinglePodVolumeAccessRefused Event goes to debug-0 with a Kubernetes API.");
            Ok(())
        }
        (Ok(()), false) => {
            agent.wait_line("the reported open", |l| {
                l.contains("CONFLICT reported file_open") && l.contains(DEBUG_UID)
            })?;
            say("open(2) succeeded: without BPF LSM an open cannot be refused. The agent watches every place\n\
                 that shows pv-data (fanotify) and reported the open with the reader's pod and process: a\n\
                 SinglePodVolumeInUse Event goes to debug-0 with a Kubernetes API, and the conflict is counted\n\
                 with route=\"open\".");
            Ok(())
        }
        (other, _) => Err(DemoError::Agent(format!("the debug pod's open of db-0's file got {other:?}"))),
    }
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("     {l}\n")).collect()
}

/// `/metrics` is text, not JSON: the body of a plain GET.
fn fetch_text(address: SocketAddr, path: &str) -> Result<String, DemoError> {
    Ok(client::get(address, path, Duration::from_secs(5))?.body)
}

//! `volguard`: the node agent and the CLI for people on the node.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use volguard::{
    agent::{self, FactsSource, RunOptions},
    cli::check,
    cli::views::{self, View},
    enforce::{HooksChoice, ModeChoice},
    kernel::{
        loader::{LoadedObject, SecurityHooks},
        lsm_probe::{self, LsmStatus},
        maps::EnforcementMaps,
        pins::{DEFAULT_PIN_ROOT, Pins},
        reader::EventSource,
        trace_backend::{self, BackendChoice},
    },
    model::exempt::ExemptReader,
    node_files::mount_table::HOST_MOUNTINFO,
    outputs::http,
    outputs::metrics_auth::tls::Certificate,
    outputs::render,
    sys::signals::StopSignals,
};

#[derive(Parser)]
#[command(version, about = "Kubernetes node agent: traces mounts and keeps ReadWriteOncePod volumes to one pod")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the node agent: trace mounts and keep single-pod volumes to one pod (needs root).
    Run(RunArgs),
    /// Remove volguard's pinned programs and state from bpffs (enforcement stops).
    Uninstall {
        /// bpffs directory of the pins.
        #[arg(long, default_value = DEFAULT_PIN_ROOT)]
        pin_root: PathBuf,
    },
    /// Show which pod owns each single-pod volume, from the pinned kernel state.
    Owners {
        #[arg(long, default_value = DEFAULT_PIN_ROOT)]
        pin_root: PathBuf,
    },
    /// Print every mount-family syscall on this node as it happens, one line each (needs root).
    Trace {
        /// Which programs trace (see `run --trace-backend`; not fanotify: it reports no syscalls).
        #[arg(long, value_enum, default_value = "auto", env = "VOLGUARD_TRACE_BACKEND")]
        trace_backend: BackendChoice,
    },
    /// Check whether BPF LSM enforcement really works on this kernel (needs root).
    LsmProbe,
    /// Play the whole story on this host, no cluster needed (needs root): a simulated node,
    /// a second pod refused or quarantined, a CSI finding, the CLI and metrics.
    Demo {
        /// Keep the agent and its API running at the end, until Ctrl-C.
        #[arg(long)]
        hold: bool,
    },
    /// Every metric the agent exports (a Markdown table, generated from its registry).
    MetricsReference {
        /// One `name type` per line, for tools.
        #[arg(long)]
        names: bool,
    },
    /// The running agent's state: mode, facts source, counts.
    Status(StatusArgs),
    /// Volumes on this node: single-pod reason, PVC, driver, owner, publishes.
    Volumes(ViewArgs),
    /// Recent conflicts: refused, quarantined or audited publishes.
    Conflicts(ViewArgs),
    /// Recent volume mount operations with their kernel-measured duration.
    Mounts(ViewArgs),
    /// CSI drivers on this node and the findings of the CSI checks.
    Csi(ViewArgs),
    /// Ask every CSI driver on this node and check it against its volumes; exits 2 when
    /// an error-severity finding exists.
    Check(check::CheckArgs),
}

#[derive(clap::Args)]
struct StatusArgs {
    #[command(flatten)]
    view: ViewArgs,
    /// Each eBPF program's runs and nanoseconds per run, as the kernel counts them (the
    /// agent must run with --bpf-stats).
    #[arg(long)]
    programs: bool,
}

#[derive(clap::Args)]
struct ViewArgs {
    /// The agent's debug API address.
    #[arg(long, default_value = http::DEFAULT_DEBUG_ADDRESS)]
    debug_address: SocketAddr,
    /// Print the debug API's JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Wider tables: pod UIDs beside their names, conflict messages.
    #[arg(long, short = 'w', conflicts_with = "json")]
    wide: bool,
}

#[derive(clap::Args)]
struct RunArgs {
    /// kubelet's --root-dir.
    #[arg(long, default_value = "/var/lib/kubelet")]
    kubelet_root: PathBuf,
    /// A single-pod volume by spec name (the PV name); repeat for more.
    #[arg(long = "single-pod-volume", value_name = "NAME")]
    single_pod_volumes: Vec<String>,
    /// enforce, quarantine or audit; auto picks enforce when the kernel really refuses
    /// (BPF LSM, else fmod_ret programs where trampolines load), else quarantine.
    #[arg(long, value_enum, default_value = "auto")]
    mode: ModeChoice,
    /// How the programs on security hooks attach in enforce and audit: bpf-lsm (needs
    /// `bpf` in the kernel's `lsm=` list), fmod-ret (fmod_ret programs on the kernel's
    /// `security_*` functions: needs BPF trampolines, not BPF LSM); auto takes the first
    /// that refuses a probe mount.
    #[arg(long, value_enum, default_value = "auto", env = "VOLGUARD_SECURITY_HOOKS")]
    security_hooks: HooksChoice,
    /// What traces the mounts: trampolines (fentry/fexit: only mount calls pay),
    /// tracepoints (every syscall on the node pays), fanotify (mount notifications on the
    /// namespace of --mountinfo: nothing pays, but no caller, latency or failures); auto
    /// picks trampolines where the kernel allows them, else fanotify where it works and the
    /// mode does not decide in the kernel, else tracepoints.
    #[arg(long, value_enum, default_value = "auto", env = "VOLGUARD_TRACE_BACKEND")]
    trace_backend: BackendChoice,
    /// bpffs directory for pinned programs and state.
    #[arg(long, default_value = DEFAULT_PIN_ROOT)]
    pin_root: PathBuf,
    /// Turn the kernel's BPF run-time statistics on, for the per-program run count and
    /// time metrics. Node-wide: every BPF program on the node is then timed at each run.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, env = "VOLGUARD_BPF_STATS")]
    bpf_stats: bool,
    /// Detach, not only report, a mount by a process outside any pod (a node administrator's
    /// `mount --bind`) that reaches a single-pod volume outside kubelet's publish.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, env = "VOLGUARD_DETACH_NODE_ACCESS")]
    detach_node_access: bool,
    /// In quarantine mode (no BPF LSM), refuse (EPERM), not only report, another pod's opens
    /// of a single-pod volume's files. Every open through the volume's mounts then waits for
    /// the agent's answer: the owner's too.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, env = "VOLGUARD_DENY_FOREIGN_OPEN")]
    deny_foreign_open: bool,
    /// A pod allowed to reach single-pod volumes outside kubelet's publish (a backup or log
    /// agent binding kubelet's pods/ on purpose): NAMESPACE/SERVICEACCOUNT,
    /// NAMESPACE:KEY=VALUE[,KEY=VALUE] (pod labels) or both; repeat for more.
    #[arg(long = "exempt-reader", value_name = "SPEC")]
    exempt_readers: Vec<ExemptReader>,
    /// Leave enforcement in the kernel when the agent exits (a new agent adopts it).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    keep_enforcement_on_exit: bool,
    /// Print every traced syscall, one line each.
    #[arg(long)]
    print_events: bool,
    /// Mount table read at start-up to rebuild who owns which single-pod volume, and
    /// re-read on every reconciliation.
    #[arg(long, default_value = HOST_MOUNTINFO)]
    mountinfo: PathBuf,
    /// Local inventory (YAML): pods, PVs, PVCs, CSI objects, for a node without a
    /// Kubernetes API. Re-read when it changes.
    #[arg(long, value_name = "FILE", conflicts_with = "kubernetes")]
    inventory: Option<PathBuf>,
    /// Take the facts from the Kubernetes API (in-cluster service account, or KUBECONFIG)
    /// and record Events on refused pods.
    #[arg(long, requires = "node_name")]
    kubernetes: bool,
    /// This node's name (the DaemonSet sets NODE_NAME from spec.nodeName).
    #[arg(long, env = "NODE_NAME")]
    node_name: Option<String>,
    /// A CSI driver socket to check besides those under the kubelet root; repeatable.
    #[arg(long = "csi-socket", value_name = "PATH")]
    csi_sockets: Vec<PathBuf>,
    /// The kernel event ring buffer's size in bytes (default 4 MiB): a power of two, at least 4096. Bigger
    /// loses fewer events in bursts (lost ones are counted and the mount table reconciles).
    #[arg(long, value_name = "BYTES", value_parser = parse_ring_size)]
    ring_buffer_size: Option<u32>,
    /// Where Prometheus scrapes `/metrics`.
    #[arg(long, default_value = http::DEFAULT_METRICS_ADDRESS)]
    metrics_address: SocketAddr,
    /// Serve `/metrics` over HTTPS, only to callers whose bearer token the API server
    /// authenticates (TokenReview) and allows `get` on the non-resource URL `/metrics`
    /// (SubjectAccessReview). `/healthz` and `/readyz` stay open (over HTTPS).
    #[arg(long, requires = "kubernetes")]
    metrics_secure: bool,
    /// The serving certificate chain (PEM) of `--metrics-secure`; without it a self-signed
    /// certificate is made at start.
    #[arg(long, value_name = "FILE", requires_all = ["metrics_secure", "metrics_key_file"])]
    metrics_cert_file: Option<PathBuf>,
    /// The private key (PEM) of `--metrics-cert-file`.
    #[arg(long, value_name = "FILE", requires_all = ["metrics_secure", "metrics_cert_file"])]
    metrics_key_file: Option<PathBuf>,
    /// Where the read-only debug API listens (keep it on localhost: it names pods and volumes).
    #[arg(long, default_value = http::DEFAULT_DEBUG_ADDRESS)]
    debug_address: SocketAddr,
    /// How often the mount table is re-read to correct what events missed (e.g. 30s, 500ms).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    reconcile_interval: Duration,
}

/// A ring buffer size the kernel accepts: a power of two of at least one page.
fn parse_ring_size(text: &str) -> Result<u32, String> {
    match text.parse::<u32>() {
        Ok(n) if n >= 4096 && n.is_power_of_two() => Ok(n),
        _ => Err(format!("{text:?}: a power of two of at least 4096 bytes")),
    }
}

/// `<number><unit>` with unit ms, s or m.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 = number.parse().map_err(|_| format!("{text:?}: expected a number and a unit (ms, s, m)"))?;
    let duration = match unit {
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n * 60),
        _ => return Err(format!("{text:?}: the unit must be ms, s or m")),
    };
    if duration < Duration::from_millis(100) {
        return Err(format!("{text:?}: at least 100ms"));
    }
    Ok(duration)
}

/// The event loop runs on a thread and runtime of its own (`agent::run`, see
/// `agent/loop_thread.rs`); the HTTP listeners, the facts source and the CSI checks run on
/// this runtime's two workers, and CPU-heavy passes on its blocking pool, so none of them
/// waits for another. Two workers whatever the node's size: the agent's work follows its
/// node's volumes, not its cores.
fn main() -> anyhow::Result<()> {
    volguard::sys::heap::keep_large_blocks_out_of_the_heap();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(8)
        .thread_name("volguard-worker")
        .enable_all()
        .build()?
        .block_on(run_command())
}

async fn run_command() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        // Colour only for a person at a terminal: `kubectl logs` and log collectors get plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .init();
    match Cli::parse().command {
        Command::Run(args) => Ok(agent::run(run_options(args)).await?),
        Command::Uninstall { pin_root } => {
            let removed = Pins::new(&pin_root).uninstall()?;
            println!("{}", if removed { "removed volguard's pins: enforcement stopped" } else { "nothing pinned" });
            Ok(())
        }
        Command::Owners { pin_root } => {
            let pins = Pins::new(&pin_root);
            let maps = EnforcementMaps::open_pinned(&pins)
                .with_context(|| format!("no pinned state under {}", pins.root().display()))?;
            for (volume, pod) in maps.owners()? {
                println!("{volume}\t{pod}");
            }
            Ok(())
        }
        Command::Trace { trace_backend } => trace(trace_backend).await,
        Command::LsmProbe => lsm_probe_command(),
        Command::Demo { hold } => {
            let binary = std::env::current_exe().context("finding the volguard binary")?;
            Ok(volguard::demo::run(&binary, hold).await?)
        }
        Command::MetricsReference { names } => {
            match names {
                true => volguard::outputs::metrics::reference().iter().for_each(|d| println!("{} {}", d.name, d.kind)),
                false => print!("{}", volguard::outputs::metrics::reference_markdown()),
            }
            Ok(())
        }
        Command::Status(StatusArgs { view, programs: false }) => show(View::Status, view),
        Command::Status(StatusArgs { view, programs: true }) => show(View::Programs, view),
        Command::Volumes(args) => show(View::Volumes, args),
        Command::Conflicts(args) => show(View::Conflicts, args),
        Command::Mounts(args) => show(View::Mounts, args),
        Command::Csi(args) => show(View::Csi, args),
        Command::Check(args) => {
            if !check::run(args).await? {
                std::process::exit(2);
            }
            Ok(())
        }
    }
}

/// What `volguard run`'s flags ask of the agent.
fn run_options(args: RunArgs) -> RunOptions {
    let metrics_secure = args.metrics_secure.then(|| match (&args.metrics_cert_file, &args.metrics_key_file) {
        (Some(cert), Some(key)) => Certificate::Files { cert: cert.clone(), key: key.clone() },
        // The names a scraper may know the node by (with hostNetwork, the node's).
        _ => {
            Certificate::SelfSigned { names: args.node_name.iter().cloned().chain(["localhost".to_owned()]).collect() }
        }
    });
    RunOptions {
        kubelet_root: args.kubelet_root,
        single_pod_volumes: args.single_pod_volumes,
        mode: args.mode,
        security_hooks: args.security_hooks,
        trace_backend: args.trace_backend,
        pin_root: args.pin_root,
        keep_enforcement_on_exit: args.keep_enforcement_on_exit,
        print_events: args.print_events,
        mountinfo: args.mountinfo,
        facts_source: match (args.inventory, args.kubernetes, args.node_name) {
            (Some(path), _, _) => FactsSource::Inventory(path),
            (None, true, Some(node_name)) => FactsSource::KubernetesApi { node_name },
            _ => FactsSource::None,
        },
        reconcile_interval: args.reconcile_interval,
        metrics_address: args.metrics_address,
        metrics_secure,
        debug_address: args.debug_address,
        csi_sockets: args.csi_sockets,
        ring_buffer_bytes: args.ring_buffer_size,
        bpf_stats: args.bpf_stats,
        detach_node_access: args.detach_node_access,
        deny_foreign_open: args.deny_foreign_open,
        exempt_readers: args.exempt_readers,
    }
}

fn show(view: View, args: ViewArgs) -> anyhow::Result<()> {
    let body = views::fetch(args.debug_address, view.path())?;
    match args.json {
        true => println!("{}", serde_json::to_string_pretty(&body)?),
        false => print!("{}", view.render(&body, args.wide)),
    }
    Ok(())
}

async fn trace(choice: BackendChoice) -> anyhow::Result<()> {
    let tracing = trace_backend::choose_syscall_backend(choice)?;
    tracing.log();
    let mut object = LoadedObject::load()?;
    object.start_kernel_log();
    object.attach(&tracing.hooks()).with_context(|| format!("attaching the mount syscall {}", tracing.backend))?;
    let mut events = EventSource::new(&mut object)?;
    let mut stop = StopSignals::install().context("installing signal handlers")?;
    eprintln!("volguard: tracing mount-family syscalls on this node; Ctrl-C to stop");

    let mut shown = 0u64;
    let mut lost_check = tokio::time::interval(Duration::from_secs(1));
    // Which pod each caller is in, by its cgroup (kubelet and plain node processes: none).
    let mut pods = volguard::node_files::caller_pod::CallerPods::default();
    loop {
        tokio::select! {
            batch = events.next_batch(|event| {
                let caller = match &event {
                    volguard::kernel::decode::Record::Syscall(e) => &e.caller,
                    volguard::kernel::decode::Record::Conflict(c) => &c.caller,
                };
                match pods.pod_uid(caller.tgid, caller.cgroup_id) {
                    Some(pod) => println!("{}  pod={pod}", render::record(&event)),
                    None => println!("{}", render::record(&event)),
                }
                shown += 1;
            }) => { batch.context("reading the event ring buffer")?; }
            _ = lost_check.tick() => { events.check(); }
            _ = stop.recv() => break,
        }
    }
    eprintln!("volguard: {shown} events shown, {} lost, {} undecodable", events.check(), events.undecodable());
    Ok(())
}

/// Probes each way the kernel can refuse (BPF LSM, then fmod_ret), each on an object of
/// its own, and says what `--mode auto` would take.
fn lsm_probe_command() -> anyhow::Result<()> {
    let mut probes = volguard::enforce::Probes::default();
    for via in HooksChoice::Auto.candidates() {
        let report = lsm_probe::probe(&mut LoadedObject::load()?, *via)?;
        if *via == SecurityHooks::BpfLsm {
            println!("active LSMs: {}", report.lsm_list.as_deref().unwrap_or("(unreadable)"));
        }
        let name = via.describe();
        println!("{name}: sb_mount program runs during the probe: {}", report.sb_mount_runs);
        match &report.status {
            LsmStatus::Active => println!("{name}: active (a probe bind mount was refused in the kernel with EBUSY)"),
            LsmStatus::Inactive { reason } => println!("{name}: inactive ({reason})"),
            LsmStatus::Unavailable { reason } => println!("{name}: unavailable ({reason})"),
        }
        probes.reports.push(report);
    }
    let decision = volguard::enforce::decide(ModeChoice::Auto, &probes)?;
    println!("--mode auto: {} ({})", decision.mode, decision.reason);
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    use super::Cli;

    /// docs/configuration.md names every subcommand and each of its flags, as clap defines
    /// them: a new flag without a line in the reference fails here.
    #[test]
    fn the_configuration_reference_lists_every_flag() {
        let doc = include_str!("../../docs/configuration.md");
        let mut missing = Vec::new();
        for command in Cli::command().get_subcommands() {
            let name = command.get_name();
            if !doc.contains(&format!("`volguard {name}`")) && !doc.contains(&format!("`{name}`")) {
                missing.push(format!("the command {name}"));
            }
            for arg in command.get_arguments() {
                let Some(long) = arg.get_long() else { continue };
                if !["help", "version"].contains(&long) && !doc.contains(&format!("`--{long}")) {
                    missing.push(format!("{name} --{long}"));
                }
            }
        }
        assert!(missing.is_empty(), "docs/configuration.md does not list: {}", missing.join(", "));
    }

    /// `--metrics-secure` needs the API for its reviews; a certificate file needs its key.
    #[test]
    fn secure_metrics_flags_come_with_what_they_need() {
        use clap::Parser as _;
        let parse = |args: &[&str]| Cli::try_parse_from([&["volguard", "run"], args].concat());
        let api = ["--kubernetes", "--node-name=n"];
        assert!(parse(&api).is_ok());
        assert!(parse(&[&api[..], &["--metrics-secure"]].concat()).is_ok());
        assert!(parse(&["--metrics-secure"]).is_err(), "without --kubernetes");
        let files = ["--metrics-cert-file=/c", "--metrics-key-file=/k"];
        assert!(parse(&[&api[..], &["--metrics-secure"], &files[..]].concat()).is_ok());
        assert!(parse(&[&api[..], &files[..]].concat()).is_err(), "files without --metrics-secure");
        assert!(parse(&[&api[..], &["--metrics-secure", files[0]]].concat()).is_err(), "a certificate without its key");
    }
}

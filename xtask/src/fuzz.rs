//! `cargo xtask fuzz`: runs each cargo-fuzz target in fuzz/ for a bounded time, seeded
//! with the real-world fixtures. cargo-fuzz wants a nightly toolchain; where there is
//! none it runs on the stable one with RUSTC_BOOTSTRAP=1 (without a sanitizer, cargo-fuzz
//! needs nothing nightly-only but the flags), so fuzzing never skips.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::Context;

use crate::proc::{cores, run_cmd, run_in_lanes, target_dir, workspace_root};

/// How a target's corpus is seeded.
enum Seeds {
    /// Nothing: libFuzzer starts from the empty input.
    None,
    /// The fixture files whose names end in one of these.
    Files(&'static [&'static str]),
    /// Each mount point of the real mountinfo fixtures, one path per seed.
    MountPoints,
}

/// Every target in fuzz/fuzz_targets/, and its seeds.
const TARGETS: &[(&str, Seeds)] = &[
    ("decode", Seeds::None),
    ("kubelet_paths", Seeds::MountPoints),
    ("mountinfo", Seeds::Files(&[".mountinfo"])),
    ("voldata", Seeds::Files(&[".json"])),
    ("inventory", Seeds::Files(&[".yaml"])),
];

/// A vol_data.json as kubelet writes it for a CSI publish (every documented key).
const VOL_DATA_SAMPLE: &str = concat!(
    r#"{"attachmentID":"csi-0a1b","driverName":"ebs.csi.aws.com","nodeName":"node-1","#,
    r#""seLinuxMountContext":"","specVolID":"pvc-1","volumeHandle":"vol-0123","volumeLifecycleMode":"Persistent"}"#,
    "\n"
);

pub const CARGO_FUZZ_VERSION: &str = "0.13.2";
const NIGHTLY: &str = "nightly";
const STABLE: &str = "stable";
/// Names the toolchain to fuzz with instead of choosing (e.g. `stable`, to try the
/// fallback on a machine that has nightly).
const TOOLCHAIN_VARIABLE: &str = "VOLGUARD_FUZZ_TOOLCHAIN";

#[derive(clap::Args)]
pub struct Options {
    /// Seconds each target runs.
    #[arg(long, default_value_t = 20)]
    pub seconds: u64,
    /// Build without optimizations: half the build time of the optimized build (4.6
    /// against 9.7 min on 2 cores: the agent's whole dependency tree, one codegen unit
    /// each), for 15 to 20 times fewer executions a second on the seeded corpora. What
    /// the test step's short runs use, to keep the test command within its hour.
    #[arg(long)]
    pub dev: bool,
    /// Only these targets (default: all).
    pub targets: Vec<String>,
}

/// The toolchain to fuzz with: nightly where rustup has it, else stable.
fn toolchain() -> String {
    if let Ok(named) = std::env::var(TOOLCHAIN_VARIABLE) {
        return named;
    }
    let nightly = Command::new("rustup").args(["run", NIGHTLY, "rustc", "--version"]).output();
    if nightly.is_ok_and(|o| o.status.success()) { NIGHTLY.to_owned() } else { STABLE.to_owned() }
}

pub fn run(options: &Options) -> anyhow::Result<()> {
    let fuzz = Command::new("cargo").args(["fuzz", "--version"]).output();
    anyhow::ensure!(
        fuzz.is_ok_and(|o| o.status.success()),
        "cargo-fuzz is not installed (`cargo xtask setup` installs {CARGO_FUZZ_VERSION})"
    );
    let toolchain = toolchain();
    println!("fuzz: on the {toolchain} toolchain{}", if toolchain == NIGHTLY { "" } else { " with RUSTC_BOOTSTRAP=1" });
    let unknown: Vec<_> = options.targets.iter().filter(|t| !TARGETS.iter().any(|(n, _)| n == t)).collect();
    anyhow::ensure!(unknown.is_empty(), "no fuzz target named {unknown:?}; there are {:?}", names());
    let selected: Vec<_> = TARGETS
        .iter()
        .filter(|(name, _)| options.targets.is_empty() || options.targets.iter().any(|t| t == name))
        .collect();

    // The parsers are safe Rust: the bugs to find are panics and broken invariants, which
    // libFuzzer catches without a sanitizer; leaving ASan out halves the build and run time.
    // `run` rebuilds unless given the same profile flag as `build`.
    let profile = if options.dev { "--dev" } else { "--release" };
    check_lock()?;
    run_cmd(fuzz_command(&toolchain).args(["build", profile, "--sanitizer", "none"]))?;
    // libFuzzer runs a target on one core: as many targets at once as there are cores.
    let outcomes =
        run_in_lanes(&selected, cores(), |(name, seeds)| fuzz_one(&toolchain, profile, name, seeds, options));
    let failed: Vec<_> = selected.iter().zip(&outcomes).filter(|(_, o)| o.is_err()).map(|((n, _), _)| *n).collect();
    for outcome in outcomes {
        if let Err(e) = outcome {
            println!("fuzz: {e:#}");
        }
    }
    anyhow::ensure!(failed.is_empty(), "fuzz targets failed: {failed:?}");
    Ok(())
}

/// Runs one target for the options' time on its seeded corpus; prints its outcome.
fn fuzz_one(toolchain: &str, profile: &str, name: &str, seeds: &Seeds, options: &Options) -> anyhow::Result<()> {
    let corpus = seeded_corpus(name, seeds)?;
    // libFuzzer prints a line per new input: keep that in a log, show the outcome.
    let log_path = target_dir().join("fuzz-logs").join(format!("{name}.log"));
    fs::create_dir_all(log_path.parent().context("a log directory")?)?;
    let log = fs::File::create(&log_path).with_context(|| format!("creating {}", log_path.display()))?;
    let mut cmd = fuzz_command(toolchain);
    cmd.args(["run", profile, "--sanitizer", "none", name])
        .arg(&corpus)
        .arg("--")
        .arg(format!("-max_total_time={}", options.seconds))
        .arg("-rss_limit_mb=2048")
        .arg("-print_final_stats=1")
        .stdout(log.try_clone()?)
        .stderr(log);
    println!("fuzz: {name} for {} s (log: {})", options.seconds, log_path.display());
    let result = run_cmd(&mut cmd);
    let text = fs::read_to_string(&log_path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    // One print per target, so that targets fuzzed side by side do not interleave.
    let mut report = String::new();
    if result.is_err() {
        for line in &lines[lines.len().saturating_sub(60)..] {
            report.push_str(&format!("  {name}| {line}\n"));
        }
    } else {
        for line in lines.iter().filter(|l| l.starts_with("Done ") || l.starts_with("stat::new_units")) {
            report.push_str(&format!("  {name}: {line}\n"));
        }
    }
    print!("{report}");
    result.with_context(|| format!("fuzz target {name} failed: the input that did it is under fuzz/artifacts/{name}/"))
}

/// Fails where fuzz/Cargo.lock is stale. cargo-fuzz has no --locked
/// (rust-fuzz/cargo-fuzz#312): without this its build would resolve crates afresh.
pub fn check_lock() -> anyhow::Result<()> {
    run_cmd(crate::proc::cargo().args(["fetch", "--locked", "--manifest-path", "fuzz/Cargo.toml"])).context(
        "fuzz/Cargo.lock is not up to date with fuzz/Cargo.toml (run `cargo fetch --manifest-path fuzz/Cargo.toml` \
         and commit it)",
    )
}

fn names() -> Vec<&'static str> {
    TARGETS.iter().map(|(n, _)| *n).collect()
}

/// `cargo fuzz` on `toolchain`, from the workspace root. The variables the outer cargo
/// set for us would point the inner build at the outer compiler.
fn fuzz_command(toolchain: &str) -> Command {
    let mut cmd = Command::new("rustup");
    cmd.current_dir(workspace_root()).args(["run", toolchain, "cargo", "fuzz"]);
    if toolchain != NIGHTLY {
        // cargo-fuzz passes -Z flags; the stable compiler takes them with this.
        cmd.env("RUSTC_BOOTSTRAP", "1");
    }
    for variable in ["CARGO", "RUSTC", "RUSTDOC", "RUSTUP_TOOLCHAIN", "CARGO_TARGET_DIR", "RUSTFLAGS"] {
        cmd.env_remove(variable);
    }
    cmd
}

/// `target/fuzz-corpus/<name>`, with the target's seeds written in; libFuzzer adds what it
/// finds there.
fn seeded_corpus(name: &str, seeds: &Seeds) -> anyhow::Result<PathBuf> {
    let corpus = target_dir().join("fuzz-corpus").join(name);
    fs::create_dir_all(&corpus).with_context(|| format!("creating {}", corpus.display()))?;
    let fixtures = workspace_root().join("agent/tests/fixtures/real-world");
    let mut inputs: Vec<(String, Vec<u8>)> = Vec::new();
    match seeds {
        Seeds::None => {}
        Seeds::Files(suffixes) => {
            for path in files_ending_in(&fixtures, suffixes)? {
                let bytes = fs::read(&path).with_context(|| format!("reading seed {}", path.display()))?;
                inputs.push((path.file_name().unwrap_or_default().to_string_lossy().into_owned(), bytes));
            }
        }
        Seeds::MountPoints => {
            for path in files_ending_in(&fixtures, &[".mountinfo"])? {
                let text = fs::read(&path).with_context(|| format!("reading seed {}", path.display()))?;
                // The fifth field of a mountinfo line is the mount point (escapes kept).
                let points = text.split(|&b| b == b'\n').filter_map(|l| l.split(|&b| b == b' ').nth(4));
                for (i, point) in points.enumerate() {
                    inputs.push((
                        format!("{}-{i}", path.file_name().unwrap_or_default().to_string_lossy()),
                        point.to_vec(),
                    ));
                }
            }
        }
    }
    match name {
        "voldata" => inputs.push(("kubelet-publish.json".into(), VOL_DATA_SAMPLE.into())),
        "inventory" => inputs.push((
            "inventory.example.yaml".into(),
            fs::read(workspace_root().join("deploy/inventory.example.yaml"))
                .context("reading the inventory example")?,
        )),
        _ => {}
    }
    for (file_name, bytes) in inputs {
        fs::write(corpus.join(&file_name), bytes).with_context(|| format!("writing seed {file_name}"))?;
    }
    Ok(corpus)
}

fn files_ending_in(dir: &Path, suffixes: &[&str]) -> anyhow::Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    for entry in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if suffixes.iter().any(|s| name.ends_with(s)) {
            found.push(path);
        }
    }
    Ok(found)
}

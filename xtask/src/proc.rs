//! Running commands loudly, and where things are.

use std::{
    env, fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::{
        Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context, bail};

/// The workspace root (the parent of xtask/).
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask/ lives in the workspace").to_path_buf()
}

/// Where setup keeps what it downloads and builds (kept between runs).
pub const CACHE_ROOT: &str = "/var/cache/volguard-dev";

/// Cargo's target directory.
pub fn target_dir() -> PathBuf {
    env::var_os("CARGO_TARGET_DIR").map_or_else(|| workspace_root().join("target"), PathBuf::from)
}

/// The cargo that runs us, so rustup's toolchain choice carries over. Without the package
/// variables `cargo run` gave xtask: build scripts (ring's, say) list some of them as
/// inputs, so with them a build from xtask and the same build from a shell would each
/// recompile what the other built.
pub fn cargo() -> Command {
    let mut cmd = Command::new(env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(workspace_root());
    for (name, _) in env::vars_os() {
        let name = name.to_string_lossy();
        let from_cargo_run = name.starts_with("CARGO_PKG_")
            || ["CARGO_MANIFEST_DIR", "CARGO_MANIFEST_PATH", "CARGO_MANIFEST_LINKS", "CARGO_CRATE_NAME"]
                .contains(&name.as_ref())
            || ["CARGO_BIN_NAME", "CARGO_PRIMARY_PACKAGE"].contains(&name.as_ref());
        if from_cargo_run {
            cmd.env_remove(name.as_ref());
        }
    }
    cmd
}

/// `cargo install` puts bpf-linker in $CARGO_HOME/bin, which a fresh shell may not have
/// on PATH; make sure our children find it.
pub fn put_cargo_bin_on_path() {
    let cargo_home = env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    let Some(bin) = cargo_home.map(|h| h.join("bin")) else {
        return;
    };
    let path = env::var_os("PATH").unwrap_or_default();
    if env::split_paths(&path).any(|p| p == bin) {
        return;
    }
    let joined = env::join_paths(std::iter::once(bin).chain(env::split_paths(&path))).expect("PATH entries");
    // SAFETY: called first thing in main, before any other thread exists.
    unsafe { env::set_var("PATH", joined) };
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

pub fn require_root(what: &str) -> anyhow::Result<()> {
    if !is_root() {
        bail!("`cargo xtask {what}` must run as root (it installs packages, loads eBPF programs and makes mounts)");
    }
    Ok(())
}

fn describe(cmd: &Command) -> String {
    let mut text = cmd.get_program().to_string_lossy().into_owned();
    for arg in cmd.get_args() {
        text.push(' ');
        text.push_str(&arg.to_string_lossy());
    }
    text
}

/// Runs `cmd`, showing it first; fails with the command line when it fails.
pub fn run_cmd(cmd: &mut Command) -> anyhow::Result<()> {
    let line = describe(cmd);
    println!("$ {line}");
    let status = cmd.status().with_context(|| format!("could not start `{line}`"))?;
    if !status.success() {
        bail!("`{line}` failed ({status})");
    }
    Ok(())
}

/// Runs a long, loud `cmd` (a download, a build) with its output in `target/logs/<log>.log`
/// instead of the console: a progress line every half minute, and on failure the log's
/// last lines and its path.
pub fn run_logged(cmd: &mut Command, what: &str, log: &str) -> anyhow::Result<()> {
    const PROGRESS_EVERY: Duration = Duration::from_secs(30);
    const TAIL_LINES: usize = 30;
    let line = describe(cmd);
    let path = target_dir().join("logs").join(format!("{log}.log"));
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let file = fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
    println!("{what}: `{line}`, its output in {}", path.display());
    let started = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file)
        .spawn()
        .with_context(|| format!("could not start `{line}`"))?;
    let mut shown = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        std::thread::sleep(Duration::from_millis(200));
        if shown.elapsed() >= PROGRESS_EVERY {
            shown = Instant::now();
            let lines = fs::read_to_string(&path).map(|t| t.lines().count()).unwrap_or(0);
            println!("  … {what}: {:.0} s, {lines} lines of output so far", started.elapsed().as_secs_f64());
        }
    };
    let took = started.elapsed().as_secs_f64();
    if !status.success() {
        let text = fs::read_to_string(&path).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(TAIL_LINES).collect();
        for l in tail.iter().rev() {
            println!("  | {l}");
        }
        bail!("{what} failed after {took:.0} s ({status}): `{line}`; its whole output: {}", path.display());
    }
    println!("{what}: done in {took:.0} s");
    Ok(())
}

/// Runs `cmd` quietly and returns its stdout; fails with its stderr.
pub fn output(cmd: &mut Command) -> anyhow::Result<String> {
    let line = describe(cmd);
    let out = cmd.stdin(Stdio::null()).output().with_context(|| format!("could not start `{line}`"))?;
    if !out.status.success() {
        bail!("`{line}` failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Every `.rs` file under `dir`, recursively, sorted.
pub fn rust_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_owned()];
    while let Some(dir) = pending.pop() {
        for entry in fs::read_dir(&dir).with_context(|| format!("listing {}", dir.display()))? {
            let path = entry?.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    Ok(files)
}

/// The `.json` files directly in `dir`, sorted.
pub fn json_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    Ok(files)
}

/// The host's cores (at least one).
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Runs `job` on every item, at most `lanes` at once, each lane taking the next item in
/// order when it is free; returns the outcomes in the items' order.
pub fn run_in_lanes<T: Sync, R: Send>(items: &[T], lanes: usize, job: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let next = AtomicUsize::new(0);
    let outcomes: Vec<Mutex<Option<R>>> = items.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..lanes {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(item) = items.get(i) else { break };
                    let outcome = job(item);
                    *outcomes[i].lock().expect("no lane panics holding it") = Some(outcome);
                }
            });
        }
    });
    outcomes.into_iter().map(|o| o.into_inner().expect("not poisoned").expect("every item was run")).collect()
}

//! `cargo xtask vm-test`: packs the integration-test binary (and the agent it starts) into
//! an initramfs, boots each Debian cloud kernel of the matrix (`cargo xtask setup` fetches
//! them) under qemu (software emulation) once per `lsm=` variant of its boots,
//! runs the binary once per area with libtest filters by module path (the tracing areas
//! once per tracing backend, forced with `VOLGUARD_TRACE_BACKEND`), and reads the verdict
//! from the serial console. A panic, a hang or a missing verdict is a failure. Boots run
//! side by side, as many as the host has cores for their emulated CPUs.

use std::{
    collections::BTreeMap,
    fs,
    io::{BufRead, BufReader},
    os::unix::fs::{PermissionsExt, symlink},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use anyhow::{Context, bail};

mod compat;
mod counts;
mod plan;

use counts::{RUN_MARK, count_mismatch, expected_test_counts};
use plan::{BOOTS, Boot, DEMO_BOOT, bench_boot, test_runs};
pub use plan::{BootName, VmKernel};

use crate::{
    proc::{cargo, cores, output, run_cmd, run_in_lanes, target_dir},
    vm_kernels::{VM_TEST_LOAD_ORDER, vm_kernel_modules},
};

#[derive(clap::Args, Default)]
pub struct Options {
    /// Kernel image to boot every chosen boot on (default: each boot's kernel of those
    /// `cargo xtask setup` fetched).
    #[arg(long)]
    pub kernel: Option<PathBuf>,
    /// Boot only these variants (default: all).
    #[arg(long = "boot", value_enum)]
    pub boots: Vec<BootName>,
    /// Boot only on these kernels of the matrix (default: all).
    #[arg(long = "linux", value_enum)]
    pub kernels: Vec<VmKernel>,
    /// Seconds one boot may take before it counts as hung (the 6.1 enforce boot, the
    /// longest, takes 440 to 600 s on a 2-core machine while the others run beside it).
    #[arg(long, default_value_t = BOOT_TIMEOUT_SECONDS)]
    pub timeout: u64,
    /// Only the boots `cargo xtask test` makes without `--full` (a boot per kernel).
    #[arg(long)]
    pub default_set: bool,
}

/// How long one boot may take by default, `cargo xtask test`'s boots included.
pub const BOOT_TIMEOUT_SECONDS: u64 = 1200;

/// What `syscall_bench`'s tests print for `cargo xtask bench` to read.
pub const BENCH_LINE: &str = "volguard-bench: ";

/// Boots `vm` with BPF LSM, runs the syscall benchmarks, and returns the JSON of
/// each of their `volguard-bench:` lines.
pub fn bench(vm: VmKernel, timeout: Duration) -> anyhow::Result<Vec<String>> {
    let boot = bench_boot(vm);
    let kernel = vm.image()?;
    // As on the host (`cargo test --release`): the loops and the agent both optimized
    // (until 2026-11-26 the VM measured unoptimized ones, a build nobody runs).
    let binaries = build_test_binaries(Profile::Release)?;
    let work = target_dir().join("vm").join(format!("bench-{}", vm.version()));
    let initrd = build_initramfs(&work, &boot, &binaries, timeout)?;
    let expected = expected_test_counts(&boot, &binaries[TEST_BINARY])?;
    println!("bench: booting {} with lsm={} (qemu, software emulation)", kernel.display(), boot.lsm);
    let (failure, console) = boot_and_judge(&kernel, &initrd, &boot, timeout, &expected)?;
    if let Some(why) = failure {
        bail!("the syscall benchmarks failed in the {} VM ({why})", vm.version());
    }
    Ok(console.iter().filter_map(|l| l.split_once(BENCH_LINE).map(|(_, json)| json.to_owned())).collect())
}

/// The first lines of a guest kernel's oops on `console` (what, where, the panic), without
/// their timestamps; `None` if the kernel did not oops.
fn kernel_oops(console: &[String]) -> Option<String> {
    let mut lines: Vec<&str> = Vec::new();
    let oops_lines = console
        .iter()
        .filter(|l| l.contains("Oops") || l.contains("RIP: 0010") || l.contains("Kernel panic"))
        .map(|l| l.split_once("] ").map_or(l.as_str(), |(_, text)| text).trim());
    // The oops repeats its RIP line after the trace.
    for line in oops_lines {
        if !lines.contains(&line) && lines.len() < 3 {
            lines.push(line);
        }
    }
    (!lines.is_empty()).then(|| lines.join(" / "))
}

/// Boots the VM kernel with BPF LSM and plays `volguard demo` in it.
pub fn demo(timeout: Duration) -> anyhow::Result<()> {
    let kernel = DEMO_BOOT.kernel.image()?;
    let binaries = BTreeMap::from([(AGENT_BINARY.to_owned(), build_release_agent()?)]);
    let work = target_dir().join("vm").join("demo");
    let initrd = build_initramfs(&work, &DEMO_BOOT, &binaries, timeout)?;
    println!("demo: booting {} with lsm={} (qemu, software emulation: slow)", kernel.display(), DEMO_BOOT.lsm);
    if boot_and_judge(&kernel, &initrd, &DEMO_BOOT, timeout, &[])?.0.is_some() {
        bail!("the demo failed in the VM");
    }
    Ok(())
}

/// The console line the init script ends with.
const VERDICT: &str = "volguard-vm: result failed=";

pub fn run(options: &Options) -> anyhow::Result<()> {
    let mut binaries = build_test_binaries(Profile::Test)?;
    binaries.insert(AGENT_BINARY.to_owned(), build_release_agent()?);
    let chosen = |b: &&Boot| {
        (options.boots.is_empty() || options.boots.contains(&b.name))
            && (options.kernels.is_empty() || options.kernels.contains(&b.kernel))
            && (!options.default_set || plan::in_default_run(b))
    };
    let mut planned = Vec::new();
    for boot in BOOTS.iter().filter(chosen) {
        let kernel = match &options.kernel {
            Some(image) => image.clone(),
            None => boot.kernel.image()?,
        };
        planned.push((boot, kernel));
    }
    let lanes = side_by_side(&planned);
    println!("vm-test: {} boots, {lanes} at a time", planned.len());
    let all_started = Instant::now();
    let timeout = Duration::from_secs(options.timeout);
    let outcomes = run_in_lanes(&planned, lanes, |(boot, kernel)| -> anyhow::Result<(bool, String)> {
        let work = target_dir().join("vm").join(boot.label().replace('/', "-"));
        let initrd = build_initramfs(&work, boot, &binaries, timeout)?;
        let expected = expected_test_counts(boot, &binaries[TEST_BINARY])?;
        println!("vm-test: booting {} with lsm={} ({})", kernel.display(), boot.lsm, boot.label());
        let started = Instant::now();
        let passed = boot_and_judge(kernel, &initrd, boot, timeout, &expected)?.0.is_none();
        let name = kernel.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        let line = format!(
            "{} on {name}: {} in {:.1} s",
            boot.label(),
            if passed { "passed" } else { "FAILED" },
            started.elapsed().as_secs_f64()
        );
        println!("vm-test: {line}");
        Ok((passed, line))
    });
    println!("vm-test: {} boots in {:.1} s", planned.len(), all_started.elapsed().as_secs_f64());
    let mut failed = Vec::new();
    for ((boot, _), outcome) in planned.iter().zip(outcomes) {
        match outcome {
            Ok((passed, line)) => {
                println!("vm-test:   {line}");
                if !passed {
                    failed.push(boot.label());
                }
            }
            Err(e) => {
                println!("vm-test:   {}: could not boot: {e:#}", boot.label());
                failed.push(boot.label());
            }
        }
    }
    if !failed.is_empty() {
        bail!("VM tests failed in {failed:?}");
    }
    Ok(())
}

/// How many of `planned`'s boots run at once: as many as the host has cores for their
/// emulated CPUs (software emulation runs each emulated CPU on one host thread), at least one.
fn side_by_side(planned: &[(&Boot, PathBuf)]) -> usize {
    let widest = planned.iter().map(|(b, _)| b.cpus as usize).max().unwrap_or(1).max(1);
    (cores() / widest).clamp(1, planned.len().max(1))
}

/// The agent binary the tests start, and where the VM has it.
const AGENT_BINARY: &str = "volguard";
const AGENT_IN_VM: &str = "/bin/volguard";

/// The integration-test target (`agent/tests/integration/`), and where the VM has it.
const TEST_BINARY: &str = "integration";
const TEST_IN_VM: &str = "/tests/integration";

/// How `build_test_binaries` builds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Profile {
    /// `cargo test`'s own profile (unoptimized).
    Test,
    /// `cargo test --release`.
    Release,
}

/// Builds the integration-test binary (and the agent binary it starts) and returns both
/// paths by target name.
fn build_test_binaries(profile: Profile) -> anyhow::Result<BTreeMap<String, PathBuf>> {
    let mut cmd = cargo();
    cmd.args(["test", "--locked", "--no-run", "--message-format=json", "-p", "volguard", "--test", TEST_BINARY]);
    if profile == Profile::Release {
        cmd.arg("--release");
    }
    executables(&output(cmd.stderr(Stdio::inherit()))?, &[TEST_BINARY, AGENT_BINARY])
}

/// The agent as users build it (`cargo build --release`; the real-node test's image holds
/// the same binary, so after it this costs nothing). Under software emulation the
/// unoptimized agent made the tests' boots take about twice as long (LsmNoBpf: 138 s
/// against 72 s).
fn build_release_agent() -> anyhow::Result<PathBuf> {
    let json = output(
        cargo()
            .args(["build", "--locked", "--release", "--message-format=json", "-p", "volguard"])
            .stderr(Stdio::inherit()),
    )?;
    let mut found = executables(&json, &[AGENT_BINARY])?;
    found.remove(AGENT_BINARY).context("cargo built no agent binary")
}

/// The executables named `names` in cargo's JSON messages, by name; an error if one is
/// missing.
fn executables(json: &str, names: &[&str]) -> anyhow::Result<BTreeMap<String, PathBuf>> {
    let mut found = BTreeMap::new();
    for line in json.lines() {
        let Ok(message) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let name = message["target"]["name"].as_str().unwrap_or_default();
        if let (Some(exe), true) = (message["executable"].as_str(), names.contains(&name)) {
            found.insert(name.to_owned(), PathBuf::from(exe));
        }
    }
    for name in names {
        if !found.contains_key(*name) {
            bail!("cargo built no binary named {name}");
        }
    }
    Ok(found)
}

/// The kernel's filesystems every VM's /init mounts first (both the test VM and the e2e
/// node): the BPF LSM list is read from securityfs, tracepoint formats from tracefs.
pub(crate) const KERNEL_FILESYSTEMS: &str = "\
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t securityfs securityfs /sys/kernel/security
mount -t tracefs tracefs /sys/kernel/tracing";

/// How long before the harness's timeout the guest's watchdog shows where every process
/// is: a hung boot then says what it waits on (the serial console is slow).
const WATCHDOG_LEAD: Duration = Duration::from_secs(60);

/// The init's watchdog: `after` seconds into the boot, each user process's threads (a
/// kernel thread has no `exe`) with
/// their state, wait channel and kernel stack, and the kernel's blocked tasks (sysrq w).
fn watchdog(after: u64) -> String {
    format!(
        r#"( sleep {after}
  echo "{WATCHDOG_MARK}still running after {after} s; where each process is:"
  for d in /proc/[0-9]*; do
    [ -e "$d/exe" ] || continue
    for t in "$d"/task/*; do
      echo "{WATCHDOG_MARK}${{t#/proc/}} $(cat "$t/comm") state=$(sed 's/.*) //' "$t/stat" | cut -d' ' -f1) wchan=$(cat "$t/wchan")"
      sed "s/^/{WATCHDOG_MARK}    /" "$t/stack"
    done
  done
  echo w > /proc/sysrq-trigger ) &
"#
    )
}

/// After each run: what memory is left and which pins stay, then the tests' pins go. An
/// agent leaves its kernel state pinned when it exits (for the next agent to adopt), tens
/// of MB of maps each; a test that failed before removing its own would otherwise starve
/// the later runs' map creation in the VM's 1 GiB (`ENOMEM` at load).
const AFTER_RUN: &str = "echo \"volguard-vm: after the run: $(grep -E '^(MemAvailable|VmallocUsed):' /proc/meminfo | tr -s ' ' | tr '\\n' ' ')pins left: $(ls /sys/fs/bpf | tr '\\n' ' ')\"\nrm -rf /sys/fs/bpf/volguard-test-*";

/// The watchdog's console lines start with this.
const WATCHDOG_MARK: &str = "volguard-vm: watchdog: ";

fn init_script(boot: &Boot, timeout: Duration) -> String {
    let mut plan = String::new();
    for (label, env, args) in test_runs(boot) {
        plan.push_str(&format!(
            "echo '{RUN_MARK}{label}: {args}'\n\
             {env}{TEST_IN_VM} --test-threads=1 {args} || {{ failed=$((failed+1)); echo 'volguard-vm: FAILED {label}'; }}\n\
             {AFTER_RUN}\n",
            args = args.join(" ")
        ));
    }
    for command in boot.agent_runs {
        plan.push_str(&format!(
            "{AGENT_IN_VM} {command} || {{ failed=$((failed+1)); echo 'volguard-vm: FAILED volguard {command}'; }}\n"
        ));
    }
    let expect = compat::expectation_exports(boot.kernel, boot.name);
    let watchdog = watchdog(timeout.saturating_sub(WATCHDOG_LEAD).as_secs());
    let load_modules = load_modules();
    format!(
        r#"#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/sbin:/bin HOME=/root RUST_BACKTRACE=1 CI=true VOLGUARD_IN_VM=1 VOLGUARD_REQUIRE_ROOT_TESTS=1 VOLGUARD_AGENT_BIN={AGENT_IN_VM}
{KERNEL_FILESYSTEMS}
mount -t bpf bpf /sys/fs/bpf
mount -t cgroup2 cgroup2 /sys/fs/cgroup
mount -t tmpfs tmpfs /tmp
{load_modules}
ip link set lo up
echo "volguard-vm: kernel $(uname -r), active LSMs: $(cat /sys/kernel/security/lsm)"
{expect}{watchdog}failed=0
{plan}echo "{VERDICT}$failed"
poweroff -f
"#
    )
}

/// Lays out busybox, the stripped test binary (when the boot runs tests), the agent and
/// their shared libraries, and packs them with the init script into `work/initrd.gz`.
fn build_initramfs(
    work: &Path,
    boot: &Boot,
    binaries: &BTreeMap<String, PathBuf>,
    timeout: Duration,
) -> anyhow::Result<PathBuf> {
    let root = work.join("root");
    let _ = fs::remove_dir_all(&root);
    for dir in ["bin", "proc", "sys", "dev", "tmp", "root", "tests"] {
        fs::create_dir_all(root.join(dir))?;
    }
    fs::copy("/bin/busybox", root.join("bin/busybox")).context("copying /bin/busybox (busybox-static)")?;
    symlink("busybox", root.join("bin/sh"))?;
    let mut libraries = Vec::new();
    if !boot.runs.is_empty() {
        let binary = &binaries[TEST_BINARY];
        let in_vm = root.join(TEST_IN_VM.trim_start_matches('/'));
        run_cmd(Command::new("strip").arg("--strip-debug").arg("-o").arg(in_vm).arg(binary))?;
        libraries.extend(shared_libraries(binary)?);
    }
    // The tests start the agent from VOLGUARD_AGENT_BIN (its build path may lie under
    // /tmp, which the init covers with a tmpfs).
    let agent = &binaries[AGENT_BINARY];
    run_cmd(
        Command::new("strip")
            .arg("--strip-debug")
            .arg("-o")
            .arg(root.join(AGENT_IN_VM.trim_start_matches('/')))
            .arg(agent),
    )?;
    libraries.extend(shared_libraries(agent)?);
    libraries.extend(block_volume_kit(&root, boot)?);
    libraries.sort();
    libraries.dedup();
    for lib in libraries {
        let dest = root.join(lib.strip_prefix("/").expect("ldd paths are absolute"));
        fs::create_dir_all(dest.parent().expect("a parent"))?;
        fs::copy(&lib, &dest).with_context(|| format!("copying {}", lib.display()))?;
    }
    let initrd = work.join("initrd.gz");
    pack_initramfs(&root, &init_script(boot, timeout), &initrd, Compression::Gzip)?;
    Ok(initrd)
}

/// Where the init finds the kernel modules it loads, and their order.
const MODULES_IN_VM: &str = "/lib/vm-test-modules";
/// The host's tools a block volume needs (busybox's `losetup` has no `--show`), kept apart
/// from busybox's links: `mkfs.ext4` is `mke2fs` under that name.
const BLOCK_TOOLS: [(&str, &str); 2] =
    [("/usr/sbin/mke2fs", "/sbin/mkfs.ext4"), ("/usr/sbin/losetup", "/sbin/losetup")];

/// What a block volume takes in the VM (`host_device_mounts`: ext4 on a loop device): the
/// kernel's loop and ext4 modules with their dependencies, where it has them as modules,
/// and `mkfs.ext4` and `losetup`. Returns the tools' libraries.
fn block_volume_kit(root: &Path, boot: &Boot) -> anyhow::Result<Vec<PathBuf>> {
    let kept = vm_kernel_modules(&boot.kernel.image()?);
    let order = fs::read_to_string(kept.join(VM_TEST_LOAD_ORDER))
        .with_context(|| format!("{}: re-run `cargo xtask setup`", kept.join(VM_TEST_LOAD_ORDER).display()))?;
    let dir = root.join(MODULES_IN_VM.trim_start_matches('/'));
    fs::create_dir_all(&dir)?;
    for name in order.lines() {
        fs::copy(kept.join(format!("{name}.ko")), dir.join(format!("{name}.ko")))
            .with_context(|| format!("the VM's module {name} (re-run `cargo xtask setup`)"))?;
    }
    fs::write(dir.join("order"), order)?;
    let mut libraries = Vec::new();
    for (tool, in_vm) in BLOCK_TOOLS {
        let dest = root.join(in_vm.trim_start_matches('/'));
        fs::create_dir_all(dest.parent().expect("a parent"))?;
        fs::copy(tool, &dest).with_context(|| format!("copying {tool} (run `cargo xtask setup`)"))?;
        libraries.extend(shared_libraries(Path::new(tool))?);
    }
    Ok(libraries)
}

/// The init's loading of the kernel modules [`block_volume_kit`] laid out.
fn load_modules() -> String {
    format!(
        "for m in $(cat {MODULES_IN_VM}/order); do insmod {MODULES_IN_VM}/$m.ko || echo \"volguard-vm: insmod $m failed\"; done"
    )
}

/// How an initramfs is packed.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Compression {
    Gzip,
    /// For large roots: the emulated kernel copies faster than it inflates.
    None,
}

/// Writes `init` as the root's executable `/init` and packs the root into `initrd` (a newc
/// cpio archive).
pub(crate) fn pack_initramfs(root: &Path, init: &str, initrd: &Path, compression: Compression) -> anyhow::Result<()> {
    let init_file = root.join("init");
    fs::write(&init_file, init)?;
    fs::set_permissions(&init_file, fs::Permissions::from_mode(0o755))?;
    let filter = if compression == Compression::Gzip { " | gzip -1" } else { "" };
    run_cmd(
        Command::new("sh")
            .current_dir(root)
            .arg("-c")
            .arg(format!("find . -print0 | cpio --null -o -H newc --quiet{filter} > '{}'", initrd.display())),
    )
}

/// The absolute paths `ldd` lists for `binary` (the loader included).
/// The absolute paths `ldd` lists for `binary`, the loader included, as the binary names
/// them (a copy of each at that path is what a root filesystem needs).
pub(crate) fn shared_libraries(binary: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let listing = output(Command::new("ldd").arg(binary))?;
    Ok(listing.lines().filter_map(|l| l.split_whitespace().find(|w| w.starts_with('/'))).map(PathBuf::from).collect())
}

/// Boots, echoes the console, and passes only on a zero verdict line: returns why it
/// failed (`None`: passed) and the console's lines.
fn boot_and_judge(
    kernel: &Path,
    initrd: &Path,
    boot: &Boot,
    timeout: Duration,
    expected_counts: &[usize],
) -> anyhow::Result<(Option<String>, Vec<String>)> {
    let append = format!("console=ttyS0 quiet lsm={} rdinit=/init panic=-1", boot.lsm);
    let mut child = Command::new("qemu-system-x86_64")
        // KVM is present on these machines but fails with an emulation error.
        .args(["-accel", boot.kernel.qemu_accel(boot.cpus), "-cpu", boot.kernel.qemu_cpu()])
        .args(["-m", "1024", "-nographic", "-no-reboot"])
        .args(["-smp", &boot.cpus.to_string()])
        .arg("-kernel")
        .arg(kernel)
        .arg("-initrd")
        .arg(initrd)
        .args(["-append", &append])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting qemu-system-x86_64 (run `cargo xtask setup`)")?;
    let (tx, rx) = mpsc::channel();
    for stream in [
        child.stdout.take().map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
        child.stderr.take().map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
    ]
    .into_iter()
    .flatten()
    {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
    }
    drop(tx);

    let deadline = Instant::now() + timeout;
    let mut console = Vec::new();
    let mut verdict = None;
    let mut timed_out = false;
    loop {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) => {
                let line = line.trim_end_matches('\r').to_owned();
                println!("  vm {}| {line}", boot.label());
                if let Some(n) = line.strip_prefix(VERDICT) {
                    verdict = n.trim().parse::<u32>().ok();
                }
                console.push(line);
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                timed_out = true;
                break;
            }
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let panicked = console.iter().any(|l| l.contains("Kernel panic"));
    let miscounted = count_mismatch(boot, &console, expected_counts);
    if verdict == Some(0) && !panicked && !timed_out && miscounted.is_none() {
        return Ok((None, console));
    }
    let mut why = if timed_out {
        format!("timed out after {} s", timeout.as_secs())
    } else if panicked {
        "kernel panic".to_owned()
    } else if let Some(n) = verdict.filter(|n| *n > 0) {
        format!("{n} test run(s) failed")
    } else if let Some(miscounted) = miscounted {
        format!("a run did not pass the tests its filter lists: {miscounted}")
    } else {
        "the VM stopped without a verdict".to_owned()
    };
    // A guest kernel's oops says more than the bare verdict (and reaches BENCHMARKS.md).
    if let Some(oops) = kernel_oops(&console) {
        why = format!("{why}: {oops}");
    }
    println!("vm-test: {} failed: {why}; console tail:", boot.label());
    for line in console.iter().rev().take(40).rev() {
        println!("  tail {}| {line}", boot.label());
    }
    Ok((Some(why), console))
}

#[cfg(test)]
mod tests {
    use super::kernel_oops;

    #[test]
    fn an_oops_is_quoted_by_its_first_lines_without_timestamps() {
        // Lines of a real 6.12 bench boot's console (2026-11-27).
        let console: Vec<String> = [
            "volguard-vm: running syscall_bench (tracepoints): --ignored syscall_bench:: --nocapture",
            "[   77.602015] Oops: int3: 0000 [#1] PREEMPT SMP NOPTI",
            "[   77.602303] CPU: 0 UID: 0 PID: 403 Comm: volguard Not tainted 6.12.95+deb12-cloud-amd64 #1",
            "[   77.602488] RIP: 0010:syscall_exit_to_user_mode_prepare+0xe1/0x170",
            "[   77.604659] RIP: 0010:syscall_exit_to_user_mode_prepare+0xe1/0x170",
            "[   77.604821] Kernel panic - not syncing: Fatal exception in interrupt",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            kernel_oops(&console).as_deref(),
            Some(
                "Oops: int3: 0000 [#1] PREEMPT SMP NOPTI / RIP: 0010:syscall_exit_to_user_mode_prepare+0xe1/0x170 / \
                 Kernel panic - not syncing: Fatal exception in interrupt"
            )
        );
        assert_eq!(kernel_oops(&console[..1]), None);
    }
}

//! Fetching the VM kernels: the Debian cloud kernels pinned by package, version and
//! SHA-256 in [`KERNELS`], fetched by an apt run of their own (its own sources list, lists
//! and cache under [`CACHE_ROOT`]), so the machine's apt sources are never touched. Of each
//! only vmlinuz and the modules the e2e VM node and `cargo xtask vm-test` load are kept;
//! nothing is installed.

use std::{
    collections::{BTreeMap, btree_map::Entry},
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, bail};

use crate::{
    proc::{CACHE_ROOT, output, run_cmd, run_logged},
    vm_kernels::{
        GUEST_MODULES, KERNELS, MODULES_STAMP, MODULES_WANTED, PinnedKernel, VM_KERNEL_DIR, VM_TEST_LOAD_ORDER,
        VM_TEST_MODULES, vm_kernel_modules, wanted_modules,
    },
};

/// The apt sources file that earlier setups added to the machine's sources for 6.12.
const OLD_BACKPORTS_SOURCES: &str = "/etc/apt/sources.list.d/volguard-dev-backports.sources";
/// The machine's own Debian sources: the mirror, components and keyring to use.
const DEBIAN_SOURCES: &str = "/etc/apt/sources.list.d/debian.sources";

/// Fetches every kernel of [`KERNELS`] not yet kept, with one apt update for them all.
pub fn install() -> anyhow::Result<()> {
    install_only(|_| true)
}

/// The kernels of the matrix whose version `wanted` picks (the demo's `--vm`: 6.1 alone).
pub fn install_only(wanted: impl Fn(&str) -> bool) -> anyhow::Result<()> {
    if Path::new(OLD_BACKPORTS_SOURCES).exists() {
        println!("setup: removing {OLD_BACKPORTS_SOURCES} (kernels now come from an apt run of their own)");
        fs::remove_file(OLD_BACKPORTS_SOURCES).with_context(|| format!("removing {OLD_BACKPORTS_SOURCES}"))?;
    }
    let kernels = || KERNELS.iter().filter(|k| wanted(k.version));
    let missing: Vec<&PinnedKernel> = kernels().filter(|k| !k.fetched()).collect();
    for kernel in kernels().filter(|k| k.fetched()) {
        println!("setup: VM kernel {} present ({})", kernel.version, kernel.image_path().display());
    }
    if missing.is_empty() {
        return Ok(());
    }
    let apt = OwnApt::new(&missing)?;
    apt.run(&["update"], None)?;
    for kernel in missing {
        println!("setup: fetching the {} VM kernel from {}", kernel.version, kernel.suite);
        fetch(&apt, kernel)?;
    }
    Ok(())
}

/// An apt with its own sources, lists and cache in `<CACHE_ROOT>/kernel-apt`.
struct OwnApt {
    dir: PathBuf,
}

impl OwnApt {
    /// Writes a sources list naming the suites of `kernels` on the machine's mirror.
    fn new(kernels: &[&PinnedKernel]) -> anyhow::Result<Self> {
        let dir = Path::new(CACHE_ROOT).join("kernel-apt");
        for sub in ["sources.list.d", "lists/partial", "cache/archives/partial"] {
            fs::create_dir_all(dir.join(sub)).with_context(|| format!("creating {}", dir.join(sub).display()))?;
        }
        let machine = fs::read_to_string(DEBIAN_SOURCES).unwrap_or_default();
        let mut suites: Vec<&str> = kernels.iter().map(|k| k.suite).collect();
        suites.sort_unstable();
        suites.dedup();
        let list: String = suites.iter().map(|suite| sources_line(&machine, suite)).collect();
        fs::write(dir.join("sources.list"), list)?;
        Ok(Self { dir })
    }

    /// `apt-get` (or `apt-cache` with `cache`) with this apt's directories, in `cwd`.
    fn run(&self, args: &[&str], cwd: Option<&Path>) -> anyhow::Result<()> {
        let d = |sub: &str| self.dir.join(sub).display().to_string();
        let mut cmd = Command::new("apt-get");
        for option in [
            format!("Dir::Etc::SourceList={}", d("sources.list")),
            format!("Dir::Etc::SourceParts={}", d("sources.list.d")),
            format!("Dir::State::Lists={}", d("lists")),
            format!("Dir::Cache={}", d("cache")),
            // Package lists only: no translations or AppStream metadata.
            "Acquire::Languages=none".to_owned(),
            "Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false".to_owned(),
            "Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false".to_owned(),
            "Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false".to_owned(),
            // apt's _apt user cannot write into root's download directory.
            "APT::Sandbox::User=root".to_owned(),
        ] {
            cmd.args(["-o", &option]);
        }
        if let Some(cwd) = cwd {
            cmd.current_dir(cwd);
        }
        let what = format!("setup: apt-get {}", args.first().copied().unwrap_or_default());
        run_logged(cmd.args(["-q"]).args(args), &what, "setup/vm-kernels-apt")
    }
}

/// A one-line sources entry for `suite`, on the mirror, components and keyring of the
/// machine's deb822 Debian sources (the security archive's for `*-security`);
/// deb.debian.org's main where they cannot be read.
fn sources_line(machine: &str, suite: &str) -> String {
    let field = |block: &str, name: &str| {
        block.lines().find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_owned())).filter(|v| !v.is_empty())
    };
    let security = suite.ends_with("-security");
    let block = machine.split("\n\n").find(|block| {
        field(block, "Suites:")
            .is_some_and(|suites| suites.split_whitespace().any(|s| s.ends_with("-security") == security))
    });
    let default_uri = if security { "http://deb.debian.org/debian-security" } else { "http://deb.debian.org/debian" };
    let uri = block.and_then(|b| field(b, "URIs:")).unwrap_or_else(|| default_uri.into());
    let components = block.and_then(|b| field(b, "Components:")).unwrap_or_else(|| "main".into());
    let signed_by = block
        .and_then(|b| field(b, "Signed-By:"))
        .unwrap_or_else(|| "/usr/share/keyrings/debian-archive-keyring.gpg".into());
    format!("deb [signed-by={signed_by}] {uri} {suite} {components}\n")
}

/// Downloads `kernel`'s .debs, checks each SHA-256, and keeps its vmlinuz and those of the
/// e2e VM node's modules it ships as modules (decompressed).
fn fetch(apt: &OwnApt, kernel: &PinnedKernel) -> anyhow::Result<()> {
    let work = Path::new(VM_KERNEL_DIR).join("download");
    let _ = fs::remove_dir_all(&work);
    fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    let specs: Vec<String> = kernel.debs.iter().map(|d| format!("{}={}", d.package, d.version)).collect();
    let mut args = vec!["download"];
    args.extend(specs.iter().map(String::as_str));
    apt.run(&args, Some(&work))?;
    let extracted = work.join("root");
    for deb in kernel.debs {
        let file = fs::read_dir(&work)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(&format!("{}_", deb.package))))
            .with_context(|| format!("apt-get download left no .deb of {}", deb.package))?;
        let sum = output(Command::new("sha256sum").arg(&file))?;
        let got = sum.split_whitespace().next().unwrap_or_default();
        if got != deb.sha256 {
            bail!("{} has SHA-256 {got}, not the pinned {}", file.display(), deb.sha256);
        }
        run_cmd(Command::new("dpkg-deb").arg("-x").arg(&file).arg(&extracted))?;
    }
    let release = kernel.release();
    // Before 7.x in boot/, since in the modules directory.
    let vmlinuz = [
        extracted.join("boot").join(format!("vmlinuz-{release}")),
        extracted.join("usr/lib/modules").join(release).join("vmlinuz"),
    ]
    .into_iter()
    .find(|p| p.exists())
    .with_context(|| format!("the {} kernel's packages have no vmlinuz", kernel.version))?;
    let image = kernel.image_path();
    let modules = vm_kernel_modules(&image);
    let _ = fs::remove_dir_all(&modules);
    fs::create_dir_all(&modules).with_context(|| format!("creating {}", modules.display()))?;
    fs::copy(&vmlinuz, &image).with_context(|| format!("copying {} to {}", vmlinuz.display(), image.display()))?;
    let kept = keep_modules(&extracted, &modules)?;
    let vm_test = keep_vm_test_modules(&extracted, release, &modules)?;
    println!(
        "setup: kept {} and modules {} (the rest of the e2e's list are no modules of {release}); vm-test loads {}",
        image.display(),
        kept.join(", "),
        if vm_test.is_empty() { "none (built in)".to_owned() } else { vm_test.join(", ") },
    );
    fs::write(modules.join(VM_TEST_LOAD_ORDER), lines(&vm_test))?;
    fs::write(modules.join(MODULES_WANTED), wanted_modules())?;
    fs::write(modules.join(MODULES_STAMP), lines(&kept))?;
    fs::remove_dir_all(&work)?;
    Ok(())
}

/// Copies each of the e2e VM node's modules found under `extracted` into `modules` as a
/// plain `.ko` (6.12 on ships them xz-compressed); returns the names kept.
fn keep_modules(extracted: &Path, modules: &Path) -> anyhow::Result<Vec<&'static str>> {
    let mut files = Vec::new();
    for root in ["lib/modules", "usr/lib/modules"] {
        let dir = extracted.join(root);
        if dir.exists() {
            find_files(&dir, &mut files)?;
        }
    }
    let mut kept = Vec::new();
    for module in GUEST_MODULES {
        let named = |suffix: &str| {
            files.iter().find(|p| p.file_name().is_some_and(|n| n.to_string_lossy() == format!("{module}{suffix}")))
        };
        let Some(file) = named(".ko").or_else(|| named(".ko.xz")) else { continue };
        keep_module(file, &modules.join(format!("{module}.ko")))?;
        kept.push(*module);
    }
    if kept.is_empty() {
        bail!("none of the e2e VM node's modules in {}", extracted.display());
    }
    Ok(kept)
}

/// Copies `file` (a `.ko`, or a `.ko.xz` decompressed) to `dest`.
fn keep_module(file: &Path, dest: &Path) -> anyhow::Result<()> {
    write_module(&module_bytes(file)?, dest)
}

fn write_module(bytes: &[u8], dest: &Path) -> anyhow::Result<()> {
    fs::write(dest, bytes).with_context(|| format!("writing {}", dest.display()))
}

/// A module file's contents, decompressed.
fn module_bytes(file: &Path) -> anyhow::Result<Vec<u8>> {
    if file.extension().is_some_and(|e| e == "xz") {
        let ko = std::process::Command::new("xz").arg("-dc").arg(file).output().context("running xz")?;
        if !ko.status.success() {
            bail!("xz could not decompress {}", file.display());
        }
        return Ok(ko.stdout);
    }
    fs::read(file).with_context(|| format!("reading {}", file.display()))
}

/// Keeps [`VM_TEST_MODULES`] and what they depend on (each module's own `depends=`: the
/// packages carry no `modules.dep`, which depmod writes at install) as `<name>.ko` in
/// `modules`; returns their names in load order.
fn keep_vm_test_modules(extracted: &Path, release: &str, modules: &Path) -> anyhow::Result<Vec<String>> {
    let dir = ["lib/modules", "usr/lib/modules"]
        .iter()
        .map(|root| extracted.join(root).join(release))
        .find(|dir| dir.exists())
        .with_context(|| format!("the {release} kernel's packages have no modules"))?;
    // 7.x's packages carry no modules.builtin: there a module with no file is built in
    // (a boot that lacks it fails its test: loop devices or ext4 missing).
    let builtin = fs::read_to_string(dir.join("modules.builtin")).ok();
    let mut files = Vec::new();
    find_files(&dir, &mut files)?;
    let by_name: BTreeMap<String, &PathBuf> = files
        .iter()
        .filter(|p| p.to_string_lossy().ends_with(".ko") || p.to_string_lossy().ends_with(".ko.xz"))
        .map(|p| (module_name(&p.to_string_lossy()), p))
        .collect();
    // Each module decompressed once: the order asks for a module's dependencies more
    // than once, and its bytes are what is kept.
    let mut decompressed: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let order = load_order(VM_TEST_MODULES, builtin.as_deref(), |name| {
        let Some(file) = by_name.get(name) else { return Ok(None) };
        let bytes = match decompressed.entry(name.to_owned()) {
            Entry::Occupied(kept) => kept.into_mut(),
            Entry::Vacant(slot) => slot.insert(module_bytes(file)?),
        };
        Ok(Some(depends(bytes)))
    })
    .with_context(|| format!("Linux {release}"))?;
    for name in &order {
        write_module(&decompressed[name], &modules.join(format!("{name}.ko")))?;
    }
    Ok(order)
}

/// The modules to load for `wanted`, each after those it depends on: `depends` gives a
/// module's dependencies (`None`: no such module file); a wanted module with no file must
/// be in `modules.builtin`, where the kernel has that list.
fn load_order(
    wanted: &[&str],
    builtin: Option<&str>,
    mut depends: impl FnMut(&str) -> anyhow::Result<Option<Vec<String>>>,
) -> anyhow::Result<Vec<String>> {
    fn visit(
        name: &str,
        depends: &mut dyn FnMut(&str) -> anyhow::Result<Option<Vec<String>>>,
        order: &mut Vec<String>,
    ) -> anyhow::Result<()> {
        if order.iter().any(|n| n == name) {
            return Ok(());
        }
        let deps = depends(name)?.with_context(|| format!("no module {name}, which another needs"))?;
        for dep in deps {
            visit(&dep, depends, order)?;
        }
        order.push(name.to_owned());
        Ok(())
    }
    let mut order = Vec::new();
    for module in wanted {
        let name = module_name(module);
        if depends(&name)?.is_some() {
            visit(&name, &mut depends, &mut order)?;
        } else if builtin.is_some_and(|list| !list.lines().any(|l| module_name(l) == name)) {
            bail!("no module {module}, and it is not built in");
        }
    }
    Ok(order)
}

/// The modules a module's `.modinfo` says it depends on (`depends=a,b`).
fn depends(module: &[u8]) -> Vec<String> {
    const KEY: &[u8] = b"\0depends=";
    let Some(at) = module.windows(KEY.len()).position(|w| w == KEY) else { return Vec::new() };
    let value = &module[at + KEY.len()..];
    let value = &value[..value.iter().position(|b| *b == 0).unwrap_or(value.len())];
    String::from_utf8_lossy(value).split(',').filter(|n| !n.is_empty()).map(module_name).collect()
}

/// A module's name from its file's path (`kernel/fs/ext4/ext4.ko.xz` → `ext4`), with `-`
/// as `_` (the kernel's spelling).
fn module_name(path: &str) -> String {
    let file = path.rsplit('/').next().unwrap_or(path);
    file.split(".ko").next().unwrap_or(file).replace('-', "_")
}

/// `names`, one a line.
fn lines(names: &[impl AsRef<str>]) -> String {
    names.iter().map(|n| format!("{}\n", n.as_ref())).collect()
}

fn find_files(dir: &Path, found: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            find_files(&path, found)?;
        } else {
            found.push(path);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::{depends, keep_vm_test_modules, load_order, sources_line};

    #[test]
    fn modules_load_after_what_they_depend_on_and_built_in_ones_not_at_all() {
        let modinfo = |deps: &str| [b"\0license=GPL\0depends=".as_slice(), deps.as_bytes(), b"\0name=x\0"].concat();
        let files = BTreeMap::from([
            ("ext4", modinfo("mbcache,jbd2,crc16")),
            ("jbd2", modinfo("mbcache")),
            ("mbcache", modinfo("")),
            ("crc16", modinfo("")),
            ("loop", b"\0name=loop\0".to_vec()),
        ]);
        let depends = |name: &str| Ok(files.get(name).map(|bytes| depends(bytes)));
        let order = load_order(&["loop", "ext4"], Some(""), depends).unwrap();
        assert_eq!(order, ["loop", "mbcache", "jbd2", "crc16", "ext4"]);
        let builtin = "kernel/drivers/block/loop.ko\n";
        let none = |_: &str| Ok(None);
        assert_eq!(load_order(&["loop"], Some(builtin), none).unwrap(), Vec::<String>::new(), "built in");
        let missing = load_order(&["ext4"], Some(builtin), none).unwrap_err().to_string();
        assert!(missing.contains("no module ext4"), "{missing}");
        assert_eq!(load_order(&["ext4"], None, none).unwrap(), Vec::<String>::new(), "no list: taken as built in");
    }

    #[test]
    fn a_packages_modules_are_kept_decompressed_with_their_dependencies_in_load_order() {
        let tmp = std::env::temp_dir().join(format!("volguard-keep-modules-{}", std::process::id()));
        let (dir, kept) = (tmp.join("usr/lib/modules/7.3.0-test/kernel"), tmp.join("kept"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::create_dir_all(&kept).unwrap();
        let ext4 = b"\0depends=mbcache\0name=ext4\0".to_vec();
        std::fs::write(dir.join("mbcache.ko"), b"\0depends=\0name=mbcache\0").unwrap();
        std::fs::write(dir.join("ext4.ko"), &ext4).unwrap();
        let xz = std::process::Command::new("xz").arg("-z").arg(dir.join("ext4.ko")).status().unwrap();
        assert!(xz.success() && dir.join("ext4.ko.xz").exists(), "xz compressed the module");
        // No loop module and no modules.builtin (7.x's packages): loop is taken as built in.
        let order = keep_vm_test_modules(&tmp, "7.3.0-test", &kept).unwrap();
        assert_eq!(order, ["mbcache", "ext4"]);
        assert_eq!(std::fs::read(kept.join("ext4.ko")).unwrap(), ext4, "kept decompressed");
        assert!(kept.join("mbcache.ko").exists());
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    #[test]
    fn a_suite_takes_the_machines_mirror_and_the_security_archive_its_own() {
        let machine = "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\n\
                       Components: main contrib\nSigned-By: /k.gpg\n\n\
                       Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n\
                       Components: main\nSigned-By: /k.gpg\n";
        assert_eq!(
            sources_line(machine, "trixie-backports"),
            "deb [signed-by=/k.gpg] http://mirror.example/debian trixie-backports main contrib\n"
        );
        assert_eq!(
            sources_line(machine, "bookworm-security"),
            "deb [signed-by=/k.gpg] http://mirror.example/debian-security bookworm-security main\n"
        );
        assert_eq!(
            sources_line("", "bullseye"),
            "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bullseye main\n"
        );
    }
}

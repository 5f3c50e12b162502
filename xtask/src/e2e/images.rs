//! The node's container images, built here with buildah (no registry anywhere) and saved
//! as archives that containerd imports: volguard's own from deploy/Containerfile, and the
//! pause container, a busybox workload, csi-driver-host-path and its sidecars, each `FROM
//! scratch`.

use std::{
    fs,
    os::unix::fs::symlink,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::Context;

use super::{
    components::pinned_version,
    upstream::{self, Source},
};
use crate::proc::{cargo, output, run_cmd, target_dir, workspace_root};

pub const VOLGUARD_REPOSITORY: &str = "localhost/volguard";
pub const BUSYBOX_IMAGE: &str = "localhost/volguard-e2e/busybox:1";
const PAUSE_VERSION: &str = "3.10";
/// buildah's storage for these builds (vfs: works in any mount namespace, needs no fuse).
const BUILDAH_ROOT: &str = "/var/cache/volguard-dev/buildah";
/// The busybox applets the workload uses.
/// Where the image keeps the agent (deploy/Containerfile's ENTRYPOINT).
pub(super) const AGENT_IN_IMAGE: &str = "/usr/local/bin/volguard";

const APPLETS: &[&str] = &["sh", "sleep", "cat", "echo", "ls", "mount", "umount", "touch", "test", "date", "stat"];
/// What the hostpath plugin runs (k8s.io/mount-utils: mount, umount; its health check:
/// findmnt; block volumes: losetup, blockdev, fallocate, dd; snapshots and clones: tar
/// with gzip, cp), from the packages upstream's alpine image has (util-linux, coreutils,
/// tar, busybox's gzip): Debian's, with the libraries they load.
const HOSTPATH_TOOLS: &[&str] =
    &["mount", "umount", "findmnt", "losetup", "blockdev", "fallocate", "dd", "cp", "tar", "gzip"];

fn buildah() -> Command {
    let mut cmd = Command::new("buildah");
    cmd.args(["--root", BUILDAH_ROOT, "--runroot", &format!("{BUILDAH_ROOT}/run"), "--storage-driver", "vfs"]);
    cmd
}

/// `buildah build` of `containerfile` in `context` as `tag`, saved to `<out>/<file>.tar`.
fn build(containerfile: &Path, context: &Path, tag: &str, out: &Path, file: &str) -> anyhow::Result<PathBuf> {
    run_cmd(
        buildah().args(["build", "--quiet", "--layers=false", "-f"]).arg(containerfile).args(["-t", tag]).arg(context),
    )
    .with_context(|| format!("building the image {tag}"))?;
    let archive = out.join(format!("{file}.tar"));
    let _ = fs::remove_file(&archive);
    run_cmd(buildah().args(["push", "--quiet", tag, &format!("docker-archive:{}:{tag}", archive.display())]))?;
    Ok(archive)
}

/// The volguard image as a user builds it (README "Install on a cluster"): the release
/// binary and the libraries `ldd` names, in deploy/Containerfile's context.
pub fn volguard(repository: &str, tag: &str, out: &Path) -> anyhow::Result<PathBuf> {
    run_cmd(cargo().args(["build", "--locked", "--release", "-p", "volguard"]))?;
    let context = out.join("volguard-context");
    image_context(&target_dir().join("release/volguard"), &context)?;
    build(
        &workspace_root().join("deploy/Containerfile"),
        &context,
        &format!("{repository}:{tag}"),
        out,
        &format!("volguard-{tag}"),
    )
}

/// Lays out deploy/Containerfile's build context: `rootfs/` with the binary at
/// /usr/local/bin/volguard, less its line tables, and every shared library it loads at
/// its own path.
pub fn image_context(binary: &Path, context: &Path) -> anyhow::Result<()> {
    let _ = fs::remove_dir_all(context);
    let rootfs = context.join("rootfs");
    copy_into(&rootfs, binary, Path::new(AGENT_IN_IMAGE))?;
    // The release profile's line tables are four fifths of the binary (105 of 137 MB):
    // kept in target/release for backtraces here, not shipped to every node (the image
    // goes from 140 to 35 MB). Symbols stay: a panic's backtrace still names functions.
    let shipped = rootfs.join(AGENT_IN_IMAGE.trim_start_matches('/'));
    run_cmd(Command::new("strip").arg("--strip-debug").arg(&shipped))
        .with_context(|| format!("stripping the debug info of {}", shipped.display()))?;
    for library in crate::vm::shared_libraries(binary)? {
        copy_into(&rootfs, &library, &library)?;
    }
    fs::create_dir_all(rootfs.join("tmp"))?;
    Ok(())
}

fn copy_into(rootfs: &Path, from: &Path, at: &Path) -> anyhow::Result<()> {
    let to = rootfs.join(at.strip_prefix("/").unwrap_or(at));
    fs::create_dir_all(to.parent().expect("a file in a directory"))?;
    fs::copy(from, &to).with_context(|| format!("copying {}", from.display()))?;
    Ok(())
}

/// The pause, busybox and CSI driver images (cached by their inputs' versions).
pub fn support_images(out: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let work = out.join("support-context");
    let _ = fs::remove_dir_all(&work);
    fs::create_dir_all(&work)?;
    let mut archives = Vec::new();

    // pause: kubernetes' own pause.c, from the k8s.io/kubernetes module go.mod pins.
    let kubernetes = pinned_version("k8s.io/kubernetes")?;
    let modcache = output(Command::new(crate::go::GO).args(["env", "GOMODCACHE"]))?;
    let source = Path::new(modcache.trim()).join(format!("k8s.io/kubernetes@{kubernetes}/build/pause/linux/pause.c"));
    let pause = work.join("pause");
    fs::create_dir_all(&pause)?;
    run_cmd(
        Command::new("gcc")
            .args(["-Os", "-static", "-Wall", "-Werror", &format!("-DVERSION=v{PAUSE_VERSION}-volguard-e2e"), "-o"])
            .arg(pause.join("pause"))
            .arg(&source),
    )
    .with_context(|| format!("compiling {} (is the module downloaded? `cargo xtask setup`)", source.display()))?;
    fs::write(
        pause.join("Containerfile"),
        "FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT [\"/pause\"]\n",
    )?;
    archives.push(build(&pause.join("Containerfile"), &pause, super::node::PAUSE_IMAGE, out, "pause")?);

    // busybox: Debian's static busybox and its applets as symlinks.
    let busybox = work.join("busybox");
    busybox_rootfs(&busybox.join("rootfs"))?;
    fs::write(busybox.join("Containerfile"), "FROM scratch\nCOPY rootfs/ /\nCMD [\"/bin/sh\"]\n")?;
    archives.push(build(&busybox.join("Containerfile"), &busybox, BUSYBOX_IMAGE, out, "busybox")?);

    Ok(archives)
}

/// The name the e2e gives the image of an upstream component.
pub fn upstream_image(source: &Source) -> String {
    format!("localhost/volguard-e2e/{}:{}", source.binary(), source.tag)
}

/// csi-driver-host-path and its sidecars, from the binaries `cargo xtask setup` built.
/// The sidecars as upstream's (distroless static): the binary alone. The plugin with a
/// shell and the userland it calls, as upstream's alpine image has them.
pub fn upstream_images(out: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let work = out.join("upstream-context");
    let _ = fs::remove_dir_all(&work);
    let mut archives = Vec::new();
    for name in upstream::DEPLOYED {
        let source = upstream::source(name)?;
        let binary = source.binary();
        let context = work.join(binary);
        let rootfs = context.join("rootfs");
        if *name == "csi-driver-host-path" {
            busybox_rootfs(&rootfs)?;
            for tool in HOSTPATH_TOOLS {
                let path = host_binary(tool)?;
                copy_into(&rootfs, &path, &Path::new("/usr/bin").join(tool))?;
                for library in crate::vm::shared_libraries(&path)? {
                    copy_into(&rootfs, &library, &library)?;
                }
            }
        } else {
            fs::create_dir_all(rootfs.join("tmp"))?;
        }
        copy_into(&rootfs, &upstream::bin(binary), &Path::new("/").join(binary))?;
        fs::write(
            context.join("Containerfile"),
            format!(
                "FROM scratch\nCOPY rootfs/ /\nENV PATH=/usr/sbin:/usr/bin:/sbin:/bin\nENTRYPOINT [\"/{binary}\"]\n"
            ),
        )?;
        archives.push(build(&context.join("Containerfile"), &context, &upstream_image(&source), out, binary)?);
    }
    Ok(archives)
}

/// The images Kubernetes' storage e2e suite runs (suite_files.rs's TEST_IMAGES), under
/// the names the suite gives them: Debian's static busybox with every applet, and agnhost
/// built from the same Kubernetes module beside it.
pub fn suite_images(out: &Path) -> anyhow::Result<Vec<PathBuf>> {
    use super::suite_files::{TEST_IMAGES, TestImage, bin};
    let work = out.join("suite-context");
    let _ = fs::remove_dir_all(&work);
    let mut archives = Vec::new();
    let applets = output(Command::new("/bin/busybox").arg("--list"))?;
    for (name, kind) in TEST_IMAGES {
        let file = name.rsplit('/').next().expect("a name").replace(':', "-");
        let context = work.join(&file);
        let rootfs = context.join("rootfs");
        busybox_rootfs(&rootfs)?;
        for applet in applets.lines().map(str::trim).filter(|a| !a.is_empty() && !APPLETS.contains(a)) {
            let _ = symlink("busybox", rootfs.join("bin").join(applet));
        }
        let entrypoint = match kind {
            TestImage::Busybox => "CMD [\"/bin/sh\"]".to_owned(),
            TestImage::GnuDd => {
                // Debian's dash as sh too: busybox's sh runs its own applet for `dd`
                // whatever /bin/dd is (it prefers applets), dash looks dd up in PATH.
                for (tool, from) in [("dd", host_binary("dd")?), ("sh", PathBuf::from("/bin/dash"))] {
                    fs::remove_file(rootfs.join("bin").join(tool))?;
                    copy_into(&rootfs, &from, &Path::new("/bin").join(tool))?;
                    for library in crate::vm::shared_libraries(&from)? {
                        copy_into(&rootfs, &library, &library)?;
                    }
                }
                "CMD [\"/bin/sh\"]".to_owned()
            }
            TestImage::Agnhost => {
                copy_into(&rootfs, &bin("agnhost"), Path::new("/agnhost"))?;
                "ENTRYPOINT [\"/agnhost\"]\nCMD [\"pause\"]".to_owned()
            }
        };
        fs::write(
            context.join("Containerfile"),
            format!("FROM scratch\nCOPY rootfs/ /\nENV PATH=/usr/sbin:/usr/bin:/sbin:/bin\n{entrypoint}\n"),
        )?;
        archives.push(build(&context.join("Containerfile"), &context, name, out, &format!("suite-{file}"))?);
    }
    Ok(archives)
}

/// Where Debian keeps `tool` (merged /usr: /usr/bin or /usr/sbin).
fn host_binary(tool: &str) -> anyhow::Result<PathBuf> {
    ["/usr/bin", "/usr/sbin"]
        .iter()
        .map(|dir| Path::new(dir).join(tool))
        .find(|p| p.is_file())
        .with_context(|| format!("{tool} is not installed (util-linux, coreutils, tar)"))
}

fn busybox_rootfs(rootfs: &Path) -> anyhow::Result<()> {
    let bin_dir = rootfs.join("bin");
    fs::create_dir_all(&bin_dir)?;
    fs::copy("/bin/busybox", bin_dir.join("busybox")).context("copying /bin/busybox (Debian busybox-static)")?;
    for applet in APPLETS {
        symlink("busybox", bin_dir.join(applet))?;
    }
    for dir in ["tmp", "data", "etc"] {
        fs::create_dir_all(rootfs.join(dir))?;
    }
    Ok(())
}

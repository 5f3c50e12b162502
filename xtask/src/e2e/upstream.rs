//! The storage components the real node runs, as upstream releases them:
//! csi-driver-host-path and the sidecars upstream deploys beside it, from the released
//! sources in `../shared/upstream` (the Go module proxy does not serve them). Each archive
//! is checked against `SOURCES.tsv`'s SHA-256 before anything is read from it, and built
//! offline from its vendored modules as upstream's release-tools build it, into
//! [`UPSTREAM_DIR`]; a component is rebuilt only when its archive or Go changed.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, bail, ensure};

use crate::{
    go::{self, Stamp},
    proc::{output, run_cmd, run_logged, workspace_root},
};

/// Where the built binaries live (outside target/, so `cargo clean` keeps them).
pub const UPSTREAM_DIR: &str = "/var/cache/volguard-dev/upstream";
/// The sources' folder beside the workspace, where the project's shared/ lives.
const DEFAULT_SOURCES: &str = "../shared/upstream";
/// The copy setup keeps of the sources once it has read them beside the workspace: a
/// checkout elsewhere on this machine (a CI clone in /tmp) finds them there.
const KEPT_SOURCES: &str = "/var/cache/volguard-dev/upstream/sources";

/// What the e2e deploys, by repository name: the plugin, its node sidecars and the
/// controller sidecars of upstream's deploy/kubernetes-1.34/hostpath. Not the snapshotter
/// nor the health monitor: no scenario takes a snapshot or reads a volume's health.
pub const DEPLOYED: &[&str] = &[
    "csi-driver-host-path",
    "node-driver-registrar",
    "livenessprobe",
    "external-provisioner",
    "external-attacher",
    "external-resizer",
];

/// One row of SOURCES.tsv: a release's source archive and the package to build.
#[derive(Clone, Debug)]
pub struct Source {
    pub file: String,
    pub repository: String,
    pub tag: String,
    pub sha256: String,
    pub package: String,
}

impl Source {
    /// The repository's own name (`external-provisioner`).
    pub fn name(&self) -> &str {
        self.repository.rsplit('/').next().unwrap_or(&self.repository)
    }

    /// The binary the package builds (`csi-provisioner`).
    pub fn binary(&self) -> &str {
        self.package.rsplit('/').next().unwrap_or(&self.package)
    }

    /// The archive, its checksum checked against SOURCES.tsv.
    pub fn verified_archive(&self) -> anyhow::Result<PathBuf> {
        let archive = sources_dir().join(&self.file);
        let sum = go::sha256(&archive).with_context(|| format!("reading {}", archive.display()))?;
        ensure!(sum == self.sha256, "{}: SHA-256 {sum}, SOURCES.tsv says {}", archive.display(), self.sha256);
        Ok(archive)
    }

    /// The archive's top folder, as `git archive --prefix` made it.
    fn top(&self) -> &str {
        self.file.trim_end_matches(".tar.gz")
    }

    /// One file of the release, read from the checked archive.
    pub fn read(&self, path: &str) -> anyhow::Result<String> {
        let archive = self.verified_archive()?;
        output(Command::new("tar").arg("-xzOf").arg(&archive).arg(format!("{}/{path}", self.top())))
            .with_context(|| format!("reading {path} from {}", archive.display()))
    }
}

/// `VOLGUARD_UPSTREAM_SOURCES` if set, else `../shared/upstream` beside the workspace if it
/// is there, else the copy setup kept ([`KEPT_SOURCES`]).
pub fn sources_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("VOLGUARD_UPSTREAM_SOURCES") {
        return PathBuf::from(dir);
    }
    let beside = workspace_root().join(DEFAULT_SOURCES);
    if beside.join("SOURCES.tsv").exists() { beside } else { PathBuf::from(KEPT_SOURCES) }
}

/// Every row of SOURCES.tsv (its header names the columns this reads).
pub fn sources() -> anyhow::Result<Vec<Source>> {
    let tsv = sources_dir().join("SOURCES.tsv");
    let text = fs::read_to_string(&tsv).with_context(|| {
        format!(
            "reading {} (the upstream sources: {DEFAULT_SOURCES} beside the workspace, the copy setup keeps in \
             {KEPT_SOURCES}, or VOLGUARD_UPSTREAM_SOURCES)",
            tsv.display()
        )
    })?;
    parse_sources(&text).with_context(|| format!("parsing {}", tsv.display()))
}

/// Copies SOURCES.tsv and its archives to [`KEPT_SOURCES`] when they were read elsewhere
/// and the copy differs; each archive's checksum is checked again where it is used.
fn keep_sources(all: &[Source]) -> anyhow::Result<()> {
    let (from, kept) = (sources_dir(), Path::new(KEPT_SOURCES));
    let same = |name: &str| fs::read(from.join(name)).ok().is_some_and(|a| fs::read(kept.join(name)).ok() == Some(a));
    if from == kept || same("SOURCES.tsv") {
        return Ok(());
    }
    fs::create_dir_all(kept)?;
    for name in all.iter().map(|s| s.file.as_str()).chain(["SOURCES.tsv"]) {
        fs::copy(from.join(name), kept.join(name)).with_context(|| format!("keeping a copy of {name}"))?;
    }
    println!("e2e: upstream sources kept in {KEPT_SOURCES}");
    Ok(())
}

fn parse_sources(text: &str) -> anyhow::Result<Vec<Source>> {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header: Vec<&str> = lines.next().context("empty")?.split('\t').collect();
    let column = |name: &str| header.iter().position(|h| *h == name).with_context(|| format!("no column {name}"));
    let (file, repository, tag, sha256, build) =
        (column("file")?, column("repository")?, column("tag")?, column("sha256")?, column("build")?);
    lines
        .map(|line| {
            let fields: Vec<&str> = line.split('\t').collect();
            let field =
                |i: usize| fields.get(i).map(|f| f.trim().to_owned()).with_context(|| format!("short row {line:?}"));
            Ok(Source {
                file: field(file)?,
                repository: field(repository)?,
                tag: field(tag)?,
                sha256: field(sha256)?,
                package: field(build)?,
            })
        })
        .collect()
}

/// The row of repository `name`.
pub fn source(name: &str) -> anyhow::Result<Source> {
    sources()?.into_iter().find(|s| s.name() == name).with_context(|| format!("SOURCES.tsv has no {name}"))
}

pub fn bin(binary: &str) -> PathBuf {
    Path::new(UPSTREAM_DIR).join("bin").join(binary)
}

/// Builds every [`DEPLOYED`] component unless a build of the same archive is there.
pub fn ensure() -> anyhow::Result<()> {
    let all = sources()?;
    keep_sources(&all)?;
    for name in DEPLOYED {
        let source = all.iter().find(|s| s.name() == *name).with_context(|| format!("SOURCES.tsv has no {name}"))?;
        build(source)?;
    }
    Ok(())
}

fn build(source: &Source) -> anyhow::Result<()> {
    // release-tools/build.make: `go build -ldflags '-X main.version=$(REV) -extldflags
    // "-static"'`, cgo off (no -trimpath there, and with it Go records no -ldflags).
    let ldflags = format!("-X main.version={} -extldflags \"-static\"", source.tag);
    let binary = bin(source.binary());
    let stamp = Stamp {
        file: Path::new(UPSTREAM_DIR).join(format!("{}.stamp", source.binary())),
        inputs: format!("{} {}\ngo build -ldflags {ldflags}\n{}", source.file, source.sha256, go::version()?),
    };
    if stamp.is_current(std::slice::from_ref(&binary)) {
        println!("e2e: {} {} present in {UPSTREAM_DIR}", source.binary(), source.tag);
        return Ok(());
    }
    stamp.clear();
    let archive = source.verified_archive()?;
    println!("e2e: building {} {} from {} (offline, vendored modules)", source.binary(), source.tag, archive.display());
    let started = std::time::Instant::now();
    // Every component is built in the same directory: Go's build cache keys a package
    // built without -trimpath by its directory too, so the sidecars' vendored copies of
    // the same modules (client-go, grpc, ...) compile once for all of them.
    let src = Path::new(UPSTREAM_DIR).join("src");
    let tree = src.join("build");
    let _ = fs::remove_dir_all(&tree);
    let _ = fs::remove_dir_all(src.join(source.top()));
    fs::create_dir_all(&src)?;
    run_cmd(Command::new("tar").arg("-xzf").arg(&archive).arg("-C").arg(&src))?;
    fs::rename(src.join(source.top()), &tree)
        .with_context(|| format!("moving {} to {}", source.top(), tree.display()))?;
    fs::create_dir_all(binary.parent().expect("a bin folder"))?;
    let built = run_logged(
        go::go(&tree)?
            .env("GOFLAGS", "-mod=vendor")
            .env("GOPROXY", "off")
            .env("GOWORK", "off")
            .env("GOTOOLCHAIN", "local")
            .args(["build", "-ldflags", &ldflags, "-o"])
            .arg(&binary)
            .arg(&source.package),
        &format!("e2e: building {}", source.binary()),
        &format!("setup/{}", source.binary()),
    );
    // The vendored tree is large and only the build reads it.
    let _ = fs::remove_dir_all(&tree);
    built.with_context(|| format!("building {} {}", source.binary(), source.tag))?;
    // Not every sidecar has --version (livenessprobe): the build's own record says it.
    let recorded = output(Command::new(go::GO).args(["version", "-m"]).arg(&binary))?;
    if !recorded.contains(&format!("main.version={}", source.tag)) {
        bail!("{} does not record main.version={}: {recorded}", binary.display(), source.tag);
    }
    println!("e2e: {} {} built in {:.0} s", source.binary(), source.tag, started.elapsed().as_secs_f64());
    stamp.write()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_read_by_their_header_and_name_their_binary() {
        let tsv = "file\trepository\ttag\tcommit\tsha256\tbuild\n\
                   a-v1.tar.gz\tgithub.com/kubernetes-csi/external-provisioner\tv6.3.0\tc0ffee\tabc\t./cmd/csi-provisioner\n";
        let rows = parse_sources(tsv).unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].name(), "external-provisioner");
        assert_eq!(rows[0].binary(), "csi-provisioner");
        assert_eq!((rows[0].tag.as_str(), rows[0].sha256.as_str()), ("v6.3.0", "abc"));
        assert!(parse_sources("file\ttag\n").is_err(), "a header without the columns is refused");
    }
}

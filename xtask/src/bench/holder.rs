//! The mount-holder child of benchmark 5: `cargo xtask bench-holder` in a mount namespace
//! of its own with N extra bind mounts, whose `/proc/<pid>/mountinfo` the agent reads. Both
//! sides are here: [`Holder`] (the bench's handle) and [`holder`] (the child's main).

use std::{
    io::{BufRead, BufReader, Read, Write},
    path::Path,
    process::{Child, Command, Stdio},
};

use anyhow::{Context, bail};

use super::sys::{bind, private_namespace};

/// A child (`cargo xtask bench-holder`) holding a mount namespace with N extra bind mounts.
pub(super) struct Holder {
    child: Child,
}

impl Holder {
    pub(super) fn start(dir: &Path, mounts: usize) -> anyhow::Result<Self> {
        let mut child = Command::new(std::env::current_exe()?)
            .args(["bench-holder", "--mounts", &mounts.to_string(), "--dir"])
            .arg(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().context("holder stdout")?).read_line(&mut line)?;
        if line.trim() != "ready" {
            let _ = child.kill();
            bail!("the mount holder failed ({line:?})");
        }
        Ok(Self { child })
    }

    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(super) fn mountinfo_lines(&self) -> anyhow::Result<usize> {
        Ok(std::fs::read_to_string(format!("/proc/{}/mountinfo", self.pid()))?.lines().count())
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        drop(self.child.stdin.take()); // EOF: the holder exits, its namespace with it
        let _ = self.child.wait();
    }
}

/// `cargo xtask bench-holder`: own mount namespace, N bind mounts, "ready", wait for EOF.
pub fn holder(mounts: usize, dir: &Path) -> anyhow::Result<()> {
    private_namespace()?;
    let base = dir.join(format!("holder-{}", std::process::id()));
    let src = base.join("src");
    std::fs::create_dir_all(&src)?;
    for i in 0..mounts {
        let t = base.join(format!("m/{i}"));
        std::fs::create_dir_all(&t)?;
        bind(&src, &t)?;
    }
    println!("ready");
    std::io::stdout().flush()?;
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    Ok(())
}

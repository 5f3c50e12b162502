//! Real work a pod does on its volume, timed, for `cargo xtask bench`'s owner-work rows:
//! what the guard costs the volume's own pod is measured on this rather than on a loop of
//! opens. Each workload runs in the directory it is given, prints the seconds its work
//! took on stdout (one number), and removes what it made afterwards (untimed).

use std::{
    fs::{self, File},
    io::{Read, Write},
    path::{Path, PathBuf},
    time::Instant,
};

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(about = "Real work on a volume, timed (for cargo xtask bench)")]
struct Cli {
    #[command(subcommand)]
    work: Work,
}

#[derive(Subcommand)]
enum Work {
    /// Writes the archive `unpack` takes: `--files` small files (1–4 KiB) in directories
    /// of 100, as a source tree or a package has them.
    MakeArchive {
        archive: PathBuf,
        #[arg(long, default_value_t = 10_000)]
        files: usize,
    },
    /// Unpacks `archive` into `dir` and reads every file back three times.
    Unpack { archive: PathBuf, dir: PathBuf },
    /// sqlite in `dir`: `--rows` inserts in commits of 100, then half as many selects by key.
    Database {
        dir: PathBuf,
        #[arg(long, default_value_t = 100_000)]
        rows: u64,
    },
    /// Writes `--mib` MiB to a file in `dir` with an fsync at the end, then reads it back.
    Stream {
        dir: PathBuf,
        #[arg(long, default_value_t = 1024)]
        mib: usize,
    },
}

fn main() -> Result<()> {
    let seconds = match Cli::parse().work {
        Work::MakeArchive { archive, files } => return make_archive(&archive, files),
        Work::Unpack { archive, dir } => unpack(&archive, &dir)?,
        Work::Database { dir, rows } => database(&dir, rows)?,
        Work::Stream { dir, mib } => stream(&dir, mib)?,
    };
    println!("{seconds}");
    Ok(())
}

/// File `i`'s size: 1–4 KiB, spread evenly.
fn file_size(i: usize) -> usize {
    1024 + (i * 37) % 3072
}

fn make_archive(archive: &Path, files: usize) -> Result<()> {
    let mut builder = tar::Builder::new(File::create(archive).with_context(|| archive.display().to_string())?);
    for i in 0..files {
        let content: Vec<u8> = (0..file_size(i)).map(|b| (b + i) as u8).collect();
        let mut header = tar::Header::new_gnu();
        header.set_size(content.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        builder.append_data(&mut header, format!("tree/d{:03}/f{i:05}.txt", i / 100), content.as_slice())?;
    }
    builder.into_inner()?.sync_all()?;
    Ok(())
}

fn unpack(archive: &Path, dir: &Path) -> Result<f64> {
    let tree = dir.join("tree");
    if tree.exists() {
        bail!("{} is there already: a run before did not finish", tree.display());
    }
    let started = Instant::now();
    tar::Archive::new(File::open(archive).with_context(|| archive.display().to_string())?).unpack(dir)?;
    let mut buffer = Vec::new();
    let mut read = 0;
    for _ in 0..3 {
        for sub in fs::read_dir(&tree)? {
            for file in fs::read_dir(sub?.path())? {
                buffer.clear();
                read += File::open(file?.path())?.read_to_end(&mut buffer)?;
            }
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    std::hint::black_box(read);
    fs::remove_dir_all(&tree)?;
    Ok(seconds)
}

fn database(dir: &Path, rows: u64) -> Result<f64> {
    let path = dir.join("bench.sqlite");
    if path.exists() {
        bail!("{} is there already: a run before did not finish", path.display());
    }
    let started = Instant::now();
    let mut db = rusqlite::Connection::open(&path)?;
    db.execute_batch("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL, value BLOB NOT NULL)")?;
    let value = [7u8; 200];
    for commit in 0..rows.div_ceil(100) {
        let tx = db.transaction()?;
        {
            let mut insert = tx.prepare_cached("INSERT INTO items (id, name, value) VALUES (?1, ?2, ?3)")?;
            for id in commit * 100..((commit + 1) * 100).min(rows) {
                insert.execute(rusqlite::params![id, format!("item-{id}"), &value[..]])?;
            }
        }
        tx.commit()?;
    }
    // Keys in a scattered but fixed order (a multiplicative step modulo the row count).
    let mut select = db.prepare("SELECT name, length(value) FROM items WHERE id = ?1")?;
    let mut found = 0u64;
    for i in 0..rows / 2 {
        let id = (i * 7919) % rows;
        found += select.query_row([id], |row| row.get::<_, u64>(1))?;
    }
    drop(select);
    db.close().map_err(|(_, e)| e)?;
    let seconds = started.elapsed().as_secs_f64();
    std::hint::black_box(found);
    fs::remove_file(&path)?;
    Ok(seconds)
}

fn stream(dir: &Path, mib: usize) -> Result<f64> {
    let path = dir.join("bench.stream");
    let chunk: Vec<u8> = (0..1 << 20).map(|b| b as u8).collect();
    let started = Instant::now();
    let mut file = File::create_new(&path).with_context(|| path.display().to_string())?;
    for _ in 0..mib {
        file.write_all(&chunk)?;
    }
    file.sync_all()?;
    drop(file);
    let mut back = File::open(&path)?;
    let mut buffer = vec![0u8; 1 << 20];
    let mut read = 0;
    loop {
        match back.read(&mut buffer)? {
            0 => break,
            n => read += n,
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    fs::remove_file(&path)?;
    if read != mib << 20 {
        bail!("read back {read} bytes of {}", mib << 20);
    }
    Ok(seconds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_workload_does_its_work_and_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let archive = dir.path().join("tree.tar");
        make_archive(&archive, 250).unwrap();
        let volume = dir.path().join("volume");
        fs::create_dir(&volume).unwrap();
        assert!(unpack(&archive, &volume).unwrap() > 0.0);
        assert!(database(&volume, 1_000).unwrap() > 0.0);
        assert!(stream(&volume, 4).unwrap() > 0.0);
        assert_eq!(fs::read_dir(&volume).unwrap().count(), 0, "a workload left files behind");
    }

    #[test]
    fn a_run_that_did_not_finish_is_an_error_not_a_mixed_tree() {
        let dir = tempfile::tempdir().unwrap();
        let archive = dir.path().join("tree.tar");
        make_archive(&archive, 10).unwrap();
        fs::create_dir(dir.path().join("tree")).unwrap();
        let error = unpack(&archive, dir.path()).unwrap_err().to_string();
        assert!(error.contains("did not finish"), "{error}");
    }
}

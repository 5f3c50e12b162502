//! Builds the eBPF object from ../agent-ebpf with Debian's rustc (which ships a prebuilt
//! `core` for bpfel-unknown-none) and bpf-linker, and leaves it in OUT_DIR for
//! `include_bytes_aligned!`. See README "Requirements" and `cargo xtask setup`.
//!
//! Also generates the gRPC code for the CSI checks from proto/*.proto: protox compiles
//! the files in pure Rust (no protoc on build machines), tonic-prost-build writes the
//! messages, clients and servers (the servers are for the tests' driver stand-ins).

use std::{
    env,
    ffi::OsString,
    path::{Path, PathBuf},
    process::{Command, ExitCode},
};

const BPF_TARGET: &str = "bpfel-unknown-none";
/// Debian's compiler with the BPF `core` (packages rustc-web, libstd-rust-web-dev-bpf).
const DEFAULT_BPF_RUSTC: &str = "/usr/bin/rustc";
const SETUP_HINT: &str = "run `cargo xtask setup` as root";

fn main() -> ExitCode {
    match build().and_then(|()| generate_grpc()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

fn build() -> Result<(), String> {
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").ok_or("no CARGO_MANIFEST_DIR")?);
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").ok_or("no OUT_DIR")?);
    let workspace = manifest_dir.parent().ok_or("agent/ has no parent")?;
    let ebpf_dir = workspace.join("agent-ebpf");
    for watched in ["agent-ebpf/src", "agent-ebpf/Cargo.toml", "agent-ebpf/Cargo.lock", "agent-common/src"] {
        println!("cargo:rerun-if-changed={}", workspace.join(watched).display());
    }
    println!("cargo:rerun-if-env-changed=VOLGUARD_BPF_RUSTC");

    let rustc = env::var_os("VOLGUARD_BPF_RUSTC").map_or_else(|| PathBuf::from(DEFAULT_BPF_RUSTC), PathBuf::from);
    check_toolchain(&rustc)?;

    let target_dir = out_dir.join("ebpf-target");
    let cargo = env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&ebpf_dir)
        .args(["build", "--locked", "--release", "--target", BPF_TARGET, "--target-dir"])
        .arg(&target_dir)
        .env("RUSTC", &rustc)
        // aya-ebpf uses unstable features on the bpf target; Debian's rustc is stable.
        .env("RUSTC_BOOTSTRAP", "1")
        // Same flags aya-build passes: debug info for BTF, and have bpf-linker emit BTF.
        .env(
            "CARGO_ENCODED_RUSTFLAGS",
            ["--cfg=bpf_target_arch=\"x86_64\"", "-Cdebuginfo=2", "-Clink-arg=--btf"].join("\x1f"),
        );
    for inherited in ["RUSTC_WORKSPACE_WRAPPER", "RUSTC_WRAPPER", "RUSTFLAGS", "CARGO_TARGET_DIR", "CARGO_BUILD_TARGET"]
    {
        cmd.env_remove(inherited);
    }
    let status = cmd.status().map_err(|e| format!("could not run cargo for the eBPF build: {e}"))?;
    if !status.success() {
        return Err(format!("the eBPF build ({}) failed: see the compiler output above", ebpf_dir.display()));
    }

    let object = target_dir.join(BPF_TARGET).join("release").join("volguard");
    std::fs::copy(&object, out_dir.join("volguard.bpf.o"))
        .map_err(|e| format!("eBPF object {} missing after build: {e}", object.display()))?;
    Ok(())
}

/// `csi.v1` (Identity, Node) and `pluginregistration` (Registration), our own subsets.
fn generate_grpc() -> Result<(), String> {
    const PROTOS: [&str; 2] = ["proto/csi.proto", "proto/pluginregistration.proto"];
    for proto in PROTOS {
        println!("cargo:rerun-if-changed={proto}");
    }
    let descriptors = protox::compile(PROTOS, ["proto"]).map_err(|e| format!("compiling the .proto files: {e}"))?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // The client dials unix sockets itself; no `connect(url)` constructor needed.
        .build_transport(false)
        .compile_fds(descriptors)
        .map_err(|e| format!("generating the gRPC code: {e}"))
}

/// One clear line when the eBPF toolchain is not installed.
fn check_toolchain(rustc: &Path) -> Result<(), String> {
    let missing = |what: &str| format!("eBPF toolchain missing ({what}); {SETUP_HINT}");
    if !rustc.exists() {
        return Err(missing(&format!("{} not found", rustc.display())));
    }
    let sysroot = Command::new(rustc)
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        .ok_or_else(|| missing(&format!("{} does not run", rustc.display())))?;
    if !sysroot.join("lib/rustlib").join(BPF_TARGET).exists() {
        return Err(missing(&format!("no prebuilt core for {BPF_TARGET} under {}", sysroot.display())));
    }
    let linker_ok = Command::new("bpf-linker").arg("--version").output().is_ok_and(|o| o.status.success());
    if !linker_ok {
        return Err(missing("bpf-linker not on PATH"));
    }
    Ok(())
}

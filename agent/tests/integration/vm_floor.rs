//! Below volguard's floor (Linux 5.13): the agent refuses to start with one line naming
//! what the kernel lacks and the minimum version, not a map or verifier error. Runs in the
//! VM on bullseye's 5.10 (`cargo xtask vm-test`).

use std::process::Command;

use crate::support::kubelet::{KubeletTree, agent_binary};

#[test]
#[ignore = "needs a kernel below the floor: runs in the VM on 5.10 (cargo xtask vm-test)"]
fn below_the_floor_the_agent_refuses_to_start_and_says_why() {
    assert_eq!(std::env::var("VOLGUARD_EXPECT_MODE").as_deref(), Ok("refuses to start"), "the boot's row");
    let tree = KubeletTree::new();
    let root = tree.root();
    let root = root.to_str().unwrap();
    let local = ["--metrics-address", "127.0.0.1:0", "--debug-address", "127.0.0.1:0", "--kubelet-root", root];
    let commands: [&[&str]; 3] =
        [&["run"], &["run", "--mode", "quarantine", "--trace-backend", "tracepoints"], &["trace"]];
    for command in commands {
        let mut cmd = Command::new(agent_binary());
        cmd.args(command).env("NO_COLOR", "1");
        if command[0] == "run" {
            cmd.args(local);
        }
        let out = cmd.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        eprintln!("volguard {}: {:?}\n{stderr}", command.join(" "), out.status);
        assert!(!out.status.success(), "{command:?} started on a kernel below the floor");
        let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("Error")).collect();
        let [line] = errors[..] else { panic!("{command:?}: not one error line: {stderr}") };
        assert!(
            line.contains("has no BPF task storage") && line.ends_with("volguard needs Linux 5.13 or later"),
            "{line}"
        );
        assert!(!stderr.contains("Caused by") && !stderr.contains("verifier"), "nothing but the line: {stderr}");
    }
}

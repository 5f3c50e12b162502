//! The agent pod's privileges, pinned: what deploy/README.md promises ("What the DaemonSet
//! needs") is what the rendered DaemonSet asks for, no more. A seventh capability, a
//! privileged container, or a dropped seccomp profile fails here, in review, not on a node.
//! Read from deploy/manifests/volguard.yaml, which check 4 keeps equal to the chart's
//! default rendering.

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde_json::{Value, json};

    use crate::proc::workspace_root;

    /// The capabilities the agent uses, each for a reason the manifest's comments give.
    const CAPABILITIES: &[&str] = &["BPF", "PERFMON", "SYS_ADMIN", "SYS_CHROOT", "SYS_PTRACE", "DAC_READ_SEARCH"];

    fn daemonset() -> Value {
        let text = std::fs::read_to_string(workspace_root().join("deploy/manifests/volguard.yaml")).unwrap();
        serde_yaml_ng::Deserializer::from_str(&text)
            .map(|doc| Value::deserialize(doc).unwrap())
            .find(|doc| doc["kind"] == "DaemonSet")
            .expect("the manifests hold the agent's DaemonSet")
    }

    #[test]
    fn the_agent_pod_asks_for_six_capabilities_and_nothing_privileged() {
        let ds = daemonset();
        let pod = &ds["spec"]["template"]["spec"];
        assert_eq!(pod["hostPID"], true, "the agent reads every process's /proc entries");
        assert_eq!(pod["hostNetwork"], true, "the debug API on the node's loopback, metrics on its address");
        assert!(pod["hostIPC"].is_null() || pod["hostIPC"] == false, "hostIPC: {}", pod["hostIPC"]);
        let containers = pod["containers"].as_array().unwrap();
        assert_eq!(containers.len(), 1, "one container");
        assert!(pod["initContainers"].is_null(), "no init container: {}", pod["initContainers"]);
        let security = &containers[0]["securityContext"];
        assert_eq!(security["privileged"], false);
        assert_eq!(security["readOnlyRootFilesystem"], true);
        assert!(
            security["allowPrivilegeEscalation"].is_null() || security["allowPrivilegeEscalation"] == false,
            "allowPrivilegeEscalation: {}",
            security["allowPrivilegeEscalation"]
        );
        assert_eq!(security["capabilities"]["drop"], json!(["ALL"]));
        assert_eq!(security["capabilities"]["add"], json!(CAPABILITIES));
        assert_eq!(security["seccompProfile"], json!({"type": "RuntimeDefault"}));
        assert_eq!(
            security["appArmorProfile"],
            json!({"type": "Unconfined"}),
            "masks and pins need mount and bpffs writes"
        );
    }
}

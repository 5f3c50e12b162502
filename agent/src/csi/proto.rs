//! The generated gRPC code (agent/build.rs from agent/proto/*.proto): messages, clients,
//! and servers (used by the tests' driver stand-ins).

/// `csi.v1`: Identity and Node, only the calls the checks make.
pub mod csi {
    #![allow(clippy::all, clippy::allow_attributes_without_reason, missing_docs, reason = "generated code")]
    include!(concat!(env!("OUT_DIR"), "/csi.v1.rs"));
}

/// `pluginregistration`: kubelet's plugin-registration GetInfo.
pub mod registration {
    #![allow(clippy::all, clippy::allow_attributes_without_reason, missing_docs, reason = "generated code")]
    include!(concat!(env!("OUT_DIR"), "/pluginregistration.rs"));
}

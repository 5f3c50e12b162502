//! The demo's CSI driver: a tiny gRPC node plugin on a unix socket that answers like a
//! real driver without `SINGLE_NODE_MULTI_WRITER`, the capability whose absence means
//! kubelet sends ReadWriteOncePod volumes as plain SINGLE_NODE_WRITER.

use std::path::Path;

use tokio::net::UnixListener;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::{Request, Response, Status, transport::Server};

use crate::csi::proto::csi::{
    self as pb,
    identity_server::{Identity, IdentityServer},
    node_server::{Node, NodeServer},
};

#[derive(Clone, Debug)]
pub struct StandIn {
    pub name: String,
    pub node_id: String,
}

/// Serves the stand-in on `socket` from a thread of its own (the demo's story blocks its
/// own thread while it waits), for the life of the process.
pub fn serve(socket: &Path, driver: StandIn) -> std::io::Result<()> {
    if let Some(dir) = socket.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let listener = std::os::unix::net::UnixListener::bind(socket)?;
    listener.set_nonblocking(true)?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    std::thread::Builder::new().name("demo-csi-driver".into()).spawn(move || {
        runtime.block_on(async move {
            let Ok(listener) = UnixListener::from_std(listener) else { return };
            let _ = Server::builder()
                .add_service(IdentityServer::new(driver.clone()))
                .add_service(NodeServer::new(driver))
                .serve_with_incoming(UnixListenerStream::new(listener))
                .await;
        });
    })?;
    Ok(())
}

#[tonic::async_trait]
impl Identity for StandIn {
    async fn get_plugin_info(
        &self,
        _: Request<pb::GetPluginInfoRequest>,
    ) -> Result<Response<pb::GetPluginInfoResponse>, Status> {
        Ok(Response::new(pb::GetPluginInfoResponse {
            name: self.name.clone(),
            vendor_version: "0.1.0-demo".into(),
            manifest: Default::default(),
        }))
    }

    async fn get_plugin_capabilities(
        &self,
        _: Request<pb::GetPluginCapabilitiesRequest>,
    ) -> Result<Response<pb::GetPluginCapabilitiesResponse>, Status> {
        Ok(Response::new(pb::GetPluginCapabilitiesResponse { capabilities: vec![] }))
    }

    async fn probe(&self, _: Request<pb::ProbeRequest>) -> Result<Response<pb::ProbeResponse>, Status> {
        Ok(Response::new(pb::ProbeResponse { ready: Some(true) }))
    }
}

#[tonic::async_trait]
impl Node for StandIn {
    async fn node_get_capabilities(
        &self,
        _: Request<pb::NodeGetCapabilitiesRequest>,
    ) -> Result<Response<pb::NodeGetCapabilitiesResponse>, Status> {
        use pb::node_service_capability::{Rpc, Type, rpc::Type as Kind};
        let rpc = |kind: Kind| pb::NodeServiceCapability { r#type: Some(Type::Rpc(Rpc { r#type: kind as i32 })) };
        // No SingleNodeMultiWriter: the point of the demo's CSI step.
        Ok(Response::new(pb::NodeGetCapabilitiesResponse { capabilities: vec![rpc(Kind::StageUnstageVolume)] }))
    }

    async fn node_get_info(
        &self,
        _: Request<pb::NodeGetInfoRequest>,
    ) -> Result<Response<pb::NodeGetInfoResponse>, Status> {
        Ok(Response::new(pb::NodeGetInfoResponse {
            node_id: self.node_id.clone(),
            max_volumes_per_node: 0,
            accessible_topology: None,
        }))
    }
}

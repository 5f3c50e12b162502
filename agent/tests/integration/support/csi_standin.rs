//! Stand-ins for a CSI driver on a node: tonic servers on real unix sockets in a
//! temporary kubelet root (identity, node and registration services, configurable
//! capabilities, node ID, readiness and hangs), and raw sockets that drop connections,
//! send garbage or stay silent.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use tokio::{io::AsyncWriteExt, net::UnixListener};
use tokio_stream::wrappers::UnixListenerStream;
use tonic::{Request, Response, Status, transport::Server};
use volguard::{
    csi::{
        CheckOptions,
        proto::{
            csi::{
                self as pb,
                identity_server::{Identity, IdentityServer},
                node_server::{Node, NodeServer},
            },
            registration::{
                InfoRequest, PluginInfo,
                registration_server::{Registration, RegistrationServer},
            },
        },
    },
    model::mounts::Mounts,
    node_files::mount_table::MountTable,
};

pub const DRIVER: &str = "stand-in.csi.volguard.io";
pub const NODE_ID: &str = "node-1";

/// How the stand-in driver behaves.
#[derive(Clone, Debug)]
pub struct Driver {
    pub name: String,
    pub node_id: String,
    pub max_volumes: i64,
    pub capabilities: Vec<pb::node_service_capability::rpc::Type>,
    pub ready: Option<bool>,
    /// Every call waits forever.
    pub hang: bool,
}

impl Default for Driver {
    fn default() -> Self {
        Self {
            name: DRIVER.into(),
            node_id: NODE_ID.into(),
            max_volumes: 0,
            capabilities: vec![pb::node_service_capability::rpc::Type::StageUnstageVolume],
            ready: Some(true),
            hang: false,
        }
    }
}

impl Driver {
    pub fn with_multi_writer(mut self) -> Self {
        self.capabilities.push(pb::node_service_capability::rpc::Type::SingleNodeMultiWriter);
        self
    }

    async fn pause(&self) {
        if self.hang {
            std::future::pending::<()>().await;
        }
    }
}

#[tonic::async_trait]
impl Identity for Driver {
    async fn get_plugin_info(
        &self,
        _: Request<pb::GetPluginInfoRequest>,
    ) -> Result<Response<pb::GetPluginInfoResponse>, Status> {
        self.pause().await;
        Ok(Response::new(pb::GetPluginInfoResponse {
            name: self.name.clone(),
            vendor_version: "0.0.1-test".into(),
            manifest: Default::default(),
        }))
    }

    async fn get_plugin_capabilities(
        &self,
        _: Request<pb::GetPluginCapabilitiesRequest>,
    ) -> Result<Response<pb::GetPluginCapabilitiesResponse>, Status> {
        self.pause().await;
        use pb::plugin_capability::{Service, Type, service};
        Ok(Response::new(pb::GetPluginCapabilitiesResponse {
            capabilities: vec![pb::PluginCapability {
                r#type: Some(Type::Service(Service { r#type: service::Type::ControllerService as i32 })),
            }],
        }))
    }

    async fn probe(&self, _: Request<pb::ProbeRequest>) -> Result<Response<pb::ProbeResponse>, Status> {
        self.pause().await;
        Ok(Response::new(pb::ProbeResponse { ready: self.ready }))
    }
}

#[tonic::async_trait]
impl Node for Driver {
    async fn node_get_capabilities(
        &self,
        _: Request<pb::NodeGetCapabilitiesRequest>,
    ) -> Result<Response<pb::NodeGetCapabilitiesResponse>, Status> {
        self.pause().await;
        use pb::node_service_capability::{Rpc, Type};
        Ok(Response::new(pb::NodeGetCapabilitiesResponse {
            capabilities: self
                .capabilities
                .iter()
                .map(|t| pb::NodeServiceCapability { r#type: Some(Type::Rpc(Rpc { r#type: *t as i32 })) })
                .collect(),
        }))
    }

    async fn node_get_info(
        &self,
        _: Request<pb::NodeGetInfoRequest>,
    ) -> Result<Response<pb::NodeGetInfoResponse>, Status> {
        self.pause().await;
        Ok(Response::new(pb::NodeGetInfoResponse {
            node_id: self.node_id.clone(),
            max_volumes_per_node: self.max_volumes,
            accessible_topology: Some(pb::Topology {
                segments: [("topology.volguard.io/node".to_string(), self.node_id.clone())].into(),
            }),
        }))
    }
}

/// A registrar stand-in: answers GetInfo with a name and an endpoint.
pub struct Registrar {
    pub info: PluginInfo,
}

#[tonic::async_trait]
impl Registration for Registrar {
    async fn get_info(&self, _: Request<InfoRequest>) -> Result<Response<PluginInfo>, Status> {
        Ok(Response::new(self.info.clone()))
    }
}

/// A temporary kubelet root with stand-ins; servers stop when the test's runtime ends.
pub struct Node1 {
    pub root: tempfile::TempDir,
}

impl Node1 {
    pub fn new() -> Self {
        Self { root: tempfile::tempdir().unwrap() }
    }

    pub fn root(&self) -> &Path {
        self.root.path()
    }

    pub fn conventional(&self, dir: &str) -> PathBuf {
        let path = self.root().join("plugins").join(dir).join("csi.sock");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        path
    }

    pub fn listener(path: &Path) -> UnixListener {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        UnixListener::bind(path).unwrap()
    }

    pub fn serve_driver(&self, path: &Path, driver: Driver) {
        let incoming = UnixListenerStream::new(Self::listener(path));
        tokio::spawn(
            Server::builder()
                .add_service(IdentityServer::new(driver.clone()))
                .add_service(NodeServer::new(driver))
                .serve_with_incoming(incoming),
        );
    }

    /// `<root>/plugins_registry/<file>` answering with `name` and `endpoint`.
    pub fn serve_registrar(&self, file: &str, name: &str, endpoint: &Path) {
        let path = self.root().join("plugins_registry").join(file);
        let incoming = UnixListenerStream::new(Self::listener(&path));
        let info = PluginInfo {
            r#type: "CSIPlugin".into(),
            name: name.into(),
            endpoint: endpoint.display().to_string(),
            supported_versions: vec!["1.0.0".into()],
        };
        tokio::spawn(
            Server::builder().add_service(RegistrationServer::new(Registrar { info })).serve_with_incoming(incoming),
        );
    }

    /// A socket that accepts and then does `what` with each connection.
    pub fn serve_raw(&self, path: &Path, what: Raw) {
        let listener = Self::listener(path);
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((mut stream, _)) = listener.accept().await {
                match what {
                    Raw::Close => drop(stream),
                    Raw::Garbage => {
                        // Not HTTP/2 at all, and the connection stays open: the client must
                        // give up on the bytes, not on end-of-file.
                        let _ = stream.write_all(b"HTTP/1.1 500 nonsense\r\n\r\n\x00\xff\x13garbage").await;
                        held.push(stream);
                    }
                    Raw::Silent => held.push(stream),
                }
            }
        });
    }

    pub fn options(&self, deadline: Duration) -> CheckOptions {
        CheckOptions { deadline, ..CheckOptions::new(self.root()) }
    }

    /// The mount table with `volume` published into `pod`.
    pub fn mounts(&self, published: &[(&str, &str)]) -> Mounts {
        let text: String = published
            .iter()
            .enumerate()
            .map(|(i, (pod, volume))| {
                format!(
                    "{} 30 8:1 / {}/pods/{pod}/volumes/kubernetes.io~csi/{volume}/mount rw - ext4 /dev/sdb rw\n",
                    100 + i,
                    self.root().display()
                )
            })
            .collect();
        Mounts::from_table(&MountTable::parse(text.as_bytes()), self.root())
    }
}

#[derive(Clone, Copy)]
pub enum Raw {
    Close,
    Garbage,
    Silent,
}

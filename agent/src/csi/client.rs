//! gRPC over a unix socket to one driver (or one registrar), every call under a deadline.
//! A driver that hangs, resets, answers garbage or is missing yields a [`CallFailure`],
//! never a stall: the deadline wraps connecting and each call, and it is also sent to the
//! driver as `grpc-timeout`.

use std::{collections::BTreeMap, path::PathBuf, time::Duration};

use hyper_util::rt::TokioIo;
use serde::Serialize;
use tokio::net::UnixStream;
use tonic::{
    Request, Status,
    transport::{Channel, Endpoint, Uri},
};

use super::proto::{
    csi::{
        self, GetPluginCapabilitiesRequest, GetPluginInfoRequest, NodeGetCapabilitiesRequest, NodeGetInfoRequest,
        ProbeRequest, identity_client::IdentityClient, node_client::NodeClient,
    },
    registration::{InfoRequest, PluginInfo, registration_client::RegistrationClient},
};

/// Which call failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CsiCall {
    /// Opening the socket and the HTTP/2 connection.
    Connect,
    /// `pluginregistration.Registration/GetInfo` on a registration socket.
    RegistrationGetInfo,
    GetPluginInfo,
    GetPluginCapabilities,
    Probe,
    NodeGetCapabilities,
    NodeGetInfo,
}

/// Why a call failed, coarsely (the message has the detail).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// No answer within the deadline.
    Timeout,
    /// The socket could not be connected to (missing, refused, not a socket).
    Unreachable,
    /// A gRPC error status: from the driver, or the transport's verdict on a reset
    /// connection or bytes that are not HTTP/2 gRPC.
    Status,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CallFailure {
    pub call: CsiCall,
    pub kind: FailureKind,
    pub message: String,
}

impl CallFailure {
    fn timeout(call: CsiCall, deadline: Duration) -> Self {
        Self { call, kind: FailureKind::Timeout, message: format!("no answer within {deadline:?}") }
    }

    fn status(call: CsiCall, status: &Status) -> Self {
        let message = with_causes(format!("{:?}: {}", status.code(), status.message()), status);
        Self { call, kind: FailureKind::Status, message }
    }
}

/// Transport errors hide the cause (reset, broken pipe, bad frame) in the source chain;
/// each layer often repeats the one below, so a cause already in the text is skipped.
fn with_causes(mut message: String, error: &(dyn std::error::Error + 'static)) -> String {
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    message
}

/// Connects to a unix socket. The URI is a placeholder: the connector ignores it and
/// dials `socket` (paths need not be UTF-8 or URI-safe this way).
pub async fn connect(socket: PathBuf, deadline: Duration) -> Result<Channel, CallFailure> {
    let endpoint = Endpoint::from_static("http://csi.invalid").connect_timeout(deadline);
    let connector = tower::service_fn(move |_: Uri| {
        let socket = socket.clone();
        async move { UnixStream::connect(socket).await.map(TokioIo::new) }
    });
    match tokio::time::timeout(deadline, endpoint.connect_with_connector(connector)).await {
        Err(_) => Err(CallFailure::timeout(CsiCall::Connect, deadline)),
        Ok(Ok(channel)) => Ok(channel),
        Ok(Err(e)) => Err(CallFailure {
            call: CsiCall::Connect,
            kind: FailureKind::Unreachable,
            message: with_causes(e.to_string(), &e),
        }),
    }
}

/// One unary call under the deadline.
async fn call<T, R>(
    call: CsiCall,
    deadline: Duration,
    send: impl AsyncFnOnce(Request<R>) -> Result<tonic::Response<T>, Status>,
    request: R,
) -> Result<T, CallFailure> {
    let mut request = Request::new(request);
    request.set_timeout(deadline);
    match tokio::time::timeout(deadline, send(request)).await {
        Err(_) => Err(CallFailure::timeout(call, deadline)),
        Ok(Err(status)) if is_timeout(&status) => Err(CallFailure::timeout(call, deadline)),
        Ok(Err(status)) => Err(CallFailure::status(call, &status)),
        Ok(Ok(response)) => Ok(response.into_inner()),
    }
}

/// The channel enforces the request's `grpc-timeout` itself and reports it as Cancelled
/// with a [`tonic::TimeoutExpired`] cause; a driver that gives up answers DeadlineExceeded.
fn is_timeout(status: &Status) -> bool {
    let mut source = std::error::Error::source(status);
    while let Some(cause) = source {
        if cause.downcast_ref::<tonic::TimeoutExpired>().is_some() {
            return true;
        }
        source = cause.source();
    }
    status.code() == tonic::Code::DeadlineExceeded
}

/// `Registration/GetInfo` on a registration socket.
pub async fn registration_info(socket: PathBuf, deadline: Duration) -> Result<PluginInfo, CallFailure> {
    let channel = connect(socket, deadline).await?;
    let mut client = RegistrationClient::new(channel);
    call(CsiCall::RegistrationGetInfo, deadline, async |r| client.get_info(r).await, InfoRequest {}).await
}

/// A node service capability (`NodeServiceCapability.RPC.Type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum NodeCapability {
    StageUnstageVolume,
    GetVolumeStats,
    ExpandVolume,
    VolumeCondition,
    SingleNodeMultiWriter,
    VolumeMountGroup,
    /// A value this build does not know (newer spec).
    Other(i32),
}

impl NodeCapability {
    fn from_wire(value: i32) -> Self {
        use csi::node_service_capability::rpc::Type;
        match Type::try_from(value) {
            Ok(Type::StageUnstageVolume) => Self::StageUnstageVolume,
            Ok(Type::GetVolumeStats) => Self::GetVolumeStats,
            Ok(Type::ExpandVolume) => Self::ExpandVolume,
            Ok(Type::VolumeCondition) => Self::VolumeCondition,
            Ok(Type::SingleNodeMultiWriter) => Self::SingleNodeMultiWriter,
            Ok(Type::VolumeMountGroup) => Self::VolumeMountGroup,
            Ok(Type::Unknown) | Err(_) => Self::Other(value),
        }
    }
}

/// What a driver said, call by call; a failed call leaves its fields `None`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DriverAnswers {
    pub plugin_name: Option<String>,
    pub vendor_version: Option<String>,
    pub plugin_capabilities: Option<Vec<String>>,
    /// `None` when Probe failed; an unset `ready` field means ready.
    pub ready: Option<bool>,
    pub node_capabilities: Option<Vec<NodeCapability>>,
    pub node_id: Option<String>,
    pub max_volumes_per_node: Option<i64>,
    pub topology: BTreeMap<String, String>,
    pub failures: Vec<CallFailure>,
}

/// Connects and makes the five calls concurrently; at most two deadlines in all.
pub async fn ask_driver(socket: PathBuf, deadline: Duration) -> DriverAnswers {
    let mut answers = DriverAnswers::default();
    let channel = match connect(socket, deadline).await {
        Ok(channel) => channel,
        Err(failure) => {
            answers.failures.push(failure);
            return answers;
        }
    };
    let (mut id1, mut id2, mut id3) = (
        IdentityClient::new(channel.clone()),
        IdentityClient::new(channel.clone()),
        IdentityClient::new(channel.clone()),
    );
    let (mut node1, mut node2) = (NodeClient::new(channel.clone()), NodeClient::new(channel));
    let (info, caps, probe, node_caps, node_info) = tokio::join!(
        call(CsiCall::GetPluginInfo, deadline, async |r| id1.get_plugin_info(r).await, GetPluginInfoRequest {}),
        call(
            CsiCall::GetPluginCapabilities,
            deadline,
            async |r| id2.get_plugin_capabilities(r).await,
            GetPluginCapabilitiesRequest {}
        ),
        call(CsiCall::Probe, deadline, async |r| id3.probe(r).await, ProbeRequest {}),
        call(
            CsiCall::NodeGetCapabilities,
            deadline,
            async |r| node1.node_get_capabilities(r).await,
            NodeGetCapabilitiesRequest {}
        ),
        call(CsiCall::NodeGetInfo, deadline, async |r| node2.node_get_info(r).await, NodeGetInfoRequest {}),
    );
    match info {
        Ok(info) => {
            answers.plugin_name = Some(info.name);
            answers.vendor_version = Some(info.vendor_version);
        }
        Err(f) => answers.failures.push(f),
    }
    match caps {
        Ok(caps) => answers.plugin_capabilities = Some(caps.capabilities.iter().map(plugin_capability_name).collect()),
        Err(f) => answers.failures.push(f),
    }
    match probe {
        Ok(probe) => answers.ready = Some(probe.ready.unwrap_or(true)),
        Err(f) => answers.failures.push(f),
    }
    match node_caps {
        Ok(caps) => {
            answers.node_capabilities = Some(
                caps.capabilities
                    .iter()
                    .filter_map(|c| c.r#type)
                    .map(|csi::node_service_capability::Type::Rpc(rpc)| NodeCapability::from_wire(rpc.r#type))
                    .collect(),
            )
        }
        Err(f) => answers.failures.push(f),
    }
    match node_info {
        Ok(info) => {
            answers.node_id = Some(info.node_id);
            answers.max_volumes_per_node = Some(info.max_volumes_per_node);
            answers.topology = info.accessible_topology.map(|t| t.segments.into_iter().collect()).unwrap_or_default();
        }
        Err(f) => answers.failures.push(f),
    }
    answers
}

/// `CONTROLLER_SERVICE`, `VOLUME_ACCESSIBILITY_CONSTRAINTS`, ..., `VOLUME_EXPANSION_ONLINE`.
fn plugin_capability_name(capability: &csi::PluginCapability) -> String {
    use csi::plugin_capability::{Type, service, volume_expansion};
    match &capability.r#type {
        Some(Type::Service(s)) => match service::Type::try_from(s.r#type) {
            Ok(t) => t.as_str_name().to_owned(),
            Err(_) => format!("SERVICE_{}", s.r#type),
        },
        Some(Type::VolumeExpansion(v)) => match volume_expansion::Type::try_from(v.r#type) {
            Ok(t) => format!("VOLUME_EXPANSION_{}", t.as_str_name()),
            Err(_) => format!("VOLUME_EXPANSION_{}", v.r#type),
        },
        None => "UNKNOWN".to_owned(),
    }
}

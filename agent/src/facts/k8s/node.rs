//! This node's Node object, read once with a GET for `volguard check`. Not watched:
//! nothing the agent enforces depends on it.

use k8s_openapi::api::core::v1::Node;
use kube::{Api, Client};

use super::convert;
use crate::facts::NodeInfo;

/// The Node named `node_name`; `Ok(None)` when the API has none of that name.
pub async fn get(client: Client, node_name: &str) -> Result<Option<NodeInfo>, kube::Error> {
    let node = Api::<Node>::all(client).get_opt(node_name).await?;
    Ok(node.as_ref().map(convert::node_info))
}

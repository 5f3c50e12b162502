//! The Kubernetes API as a source of [`crate::facts`] and the sink for conflict Events.
//!
//! - [`client`]: the agent's kube client, HTTP/2 so that all its watches share one connection.
//! - [`convert`]: pure conversions from API objects to facts.
//! - [`source`]: watches pods on this node, CSIDrivers and this node's CSINode, follows the
//!   PVCs and PVs those pods use ([`follow`], each with an [`object_watch`]), and
//!   publishes a [`crate::facts::Snapshot`] on a `tokio::sync::watch` channel; [`health`]
//!   decides when, [`watch_loop`] keeps each kind's watcher alive.
//! - [`node`]: one GET of this node's Node (its kubelet version), for `volguard check`.
//! - [`crate::outputs::events`] turns [`crate::model::explain::Conflict`]s into Warning Events on the refused pod.

pub mod client;
pub mod convert;
pub mod follow;
pub mod health;
pub mod node;
pub mod object_watch;
pub mod source;
pub mod watch_loop;

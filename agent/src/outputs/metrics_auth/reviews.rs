//! The two reviews of [`Reviews`] asked of the API server with the agent's kube client:
//! `create` of a TokenReview and of a SubjectAccessReview (the chart grants both only
//! when `metrics.secure` is on).

use std::fmt::Display;

use k8s_openapi::api::{
    authentication::v1::{TokenReview, TokenReviewSpec, UserInfo},
    authorization::v1::{NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec},
};
use kube::{Api, Client, api::PostParams};

use super::decision::{METRICS_PATH, METRICS_VERB, Reviews};

pub struct KubeReviews {
    tokens: Api<TokenReview>,
    access: Api<SubjectAccessReview>,
}

impl KubeReviews {
    pub fn new(client: Client) -> Self {
        Self { tokens: Api::all(client.clone()), access: Api::all(client) }
    }
}

fn text(e: impl Display) -> String {
    e.to_string()
}

impl Reviews for KubeReviews {
    async fn authenticate(&self, token: &str) -> Result<Option<UserInfo>, String> {
        // No audiences: the API server's own, as kubectl's and Prometheus's tokens carry.
        let review = TokenReview {
            spec: TokenReviewSpec { token: Some(token.to_owned()), audiences: None },
            ..TokenReview::default()
        };
        let answer = self.tokens.create(&PostParams::default(), &review).await.map_err(text)?;
        let status = answer.status.unwrap_or_default();
        Ok(if status.authenticated == Some(true) { status.user } else { None })
    }

    async fn may_read_metrics(&self, user: &UserInfo) -> Result<bool, String> {
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username.clone(),
                uid: user.uid.clone(),
                groups: user.groups.clone(),
                extra: user.extra.clone(),
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(METRICS_PATH.into()),
                    verb: Some(METRICS_VERB.into()),
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let answer = self.access.create(&PostParams::default(), &review).await.map_err(text)?;
        Ok(answer.status.is_some_and(|s| s.allowed))
    }
}

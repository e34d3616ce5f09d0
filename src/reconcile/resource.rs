//! The API resource each governed kind is read and written as.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::ApiResource;

use crate::engine::Kind;

/// The API resource a governed kind is read and written as. The reconciler
/// lists the four kinds; a `Scale` is the Deployment's subresource, seen only
/// at admission (its Deployment is what is read and written).
pub fn api_resource(kind: Kind) -> ApiResource {
    match kind {
        Kind::Deployment | Kind::Scale => ApiResource::erase::<Deployment>(&()),
        Kind::HorizontalPodAutoscaler => ApiResource::erase::<HorizontalPodAutoscaler>(&()),
        Kind::PodDisruptionBudget => ApiResource::erase::<PodDisruptionBudget>(&()),
        Kind::ConfigMap => ApiResource::erase::<ConfigMap>(&()),
    }
}

//! The API resource each governed kind is read and written as.

use kube::api::{ApiResource, GroupVersionKind};

use crate::engine::Kind;

/// The API resource a governed kind is read and written as. The reconciler
/// lists the four kinds; a `Scale` is the Deployment's subresource, seen only
/// at admission (its Deployment is what is read and written).
pub fn api_resource(kind: Kind) -> ApiResource {
    let read_as = match kind {
        Kind::Scale => Kind::Deployment,
        other => other,
    }
    .spec();
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(read_as.group, read_as.version, read_as.name),
        read_as.plural,
    )
}

//! The API resource each governed kind is read and written as.

use kube::api::{ApiResource, GroupVersionKind};

use crate::engine::Kind;

/// The API resource a governed kind is read and written as, as its
/// [`crate::engine::kinds::KINDS`] entry declares it (a `Scale`, the
/// Deployment's subresource seen only at admission, is read and written as
/// its Deployment).
pub fn api_resource(kind: Kind) -> ApiResource {
    let spec = kind.spec();
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(spec.group, spec.version, spec.resource_kind),
        spec.plural,
    )
}

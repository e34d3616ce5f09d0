//! PriorityClasses (`scheduling.k8s.io/v1`, cluster-scoped), watched while
//! a policy in force names one: a Deployment whose pods name a PriorityClass
//! that does not exist can create no pod (the API server's Priority
//! admission refuses each), so a typo in the policy would roll every
//! governed Deployment onto pods that are never created. The engine holds
//! the name back, with a warning, where the class is known to be missing
//! ([`crate::engine::Facts::priority_classes`]). Only names count.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::{Api, ResourceExt};

use super::namespace_watches::{Kind, Update};
use super::{Msg, Source};

/// The scope key of the one watch: PriorityClasses belong to no namespace.
pub(crate) const CLUSTER: &str = "";

impl Kind for PriorityClass {
    const SOURCE: Source = Source::PriorityClasses;
    /// Only that it is there counts.
    type Counts = ();
    type Value = BTreeSet<String>;

    fn api(client: kube::Client, _: &str) -> Api<PriorityClass> {
        Api::all(client)
    }
    fn counts(&self) -> Option<()> {
        Some(())
    }
    fn value(objects: &[Arc<PriorityClass>]) -> BTreeSet<String> {
        objects.iter().map(|pc| pc.name_any()).collect()
    }
    fn msg(_: String, id: u64, update: Update<BTreeSet<String>>) -> Msg {
        Msg::PriorityClasses { id, update }
    }
}

//! Knative's components, declared once: every Deployment of Knative's
//! releases the webhook knows, where the release puts it and how Knative
//! runs it. The engine's rules (which Deployments an HPA scales, which run
//! leader election, which accept `--disable-ha`, which Knative scales on
//! demand), the policy's name checks ("a Knative Deployment of namespace
//! kourier-system") and the table in docs/policy.md all read
//! [`COMPONENTS`]; governing a new component is one entry here.
//!
//! What nothing in a Deployment shows is declared, not derived: whether its
//! binary runs knative.dev/pkg sharedmain's leader election, or accepts
//! `--disable-ha` (controller and autoscaler exit on it).

/// How Knative sets a component's replica count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scaling {
    /// `spec.replicas` of the Deployment (the policy's replicas go there).
    Replicas,
    /// An HPA the release ships: `spec.replicas` belongs to it, and the
    /// policy raises its `minReplicas` instead.
    Hpa,
    /// Knative scales it 0 <-> 1 on demand (eventing-controller and
    /// PingSources; the Knative Operator's `haUnSupported` list): its
    /// replicas are never touched.
    OnDemand,
}

/// One Deployment of a Knative release.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Component {
    pub name: &'static str,
    /// The namespace the release puts it in.
    pub namespace: &'static str,
    /// The release manifest that ships it.
    pub release: &'static str,
    pub scaling: Scaling,
    /// Its processes run knative.dev/pkg sharedmain's leader election,
    /// reading `config-leader-election` at start.
    pub leader_elected: bool,
    /// Its processes run leader election with settings another component
    /// writes into their environment (`K_LEADER_ELECTION_CONFIG`, which
    /// eventing-controller fills from `config-leader-election`), not read
    /// from the ConfigMap at start: no settings hash (its owner rolls it).
    pub elected_by_env: bool,
    /// Its binary accepts `--disable-ha`.
    pub disable_ha: bool,
    /// The PodDisruptionBudget the release ships for it.
    pub pdb: Option<&'static str>,
}

impl Component {
    const fn new(name: &'static str, namespace: &'static str, release: &'static str) -> Self {
        Component {
            name,
            namespace,
            release,
            scaling: Scaling::Replicas,
            leader_elected: false,
            elected_by_env: false,
            disable_ha: false,
            pdb: None,
        }
    }
    const fn hpa(self, pdb: Option<&'static str>) -> Self {
        Component {
            scaling: Scaling::Hpa,
            pdb,
            ..self
        }
    }
    const fn on_demand(self) -> Self {
        Component {
            scaling: Scaling::OnDemand,
            ..self
        }
    }
    const fn leader_elected(self) -> Self {
        Component {
            leader_elected: true,
            ..self
        }
    }
    const fn elected_by_env(self) -> Self {
        Component {
            elected_by_env: true,
            ..self
        }
    }
    const fn disable_ha(self) -> Self {
        Component {
            disable_ha: true,
            ..self
        }
    }
}

const SERVING: &str = "knative-serving";
const KOURIER: &str = "kourier-system";
const EVENTING: &str = "knative-eventing";

const fn serving(name: &'static str, release: &'static str) -> Component {
    Component::new(name, SERVING, release)
}
const fn eventing(name: &'static str, release: &'static str) -> Component {
    Component::new(name, EVENTING, release)
}

/// Serving (core, HPA, domain mapping), its networking layers (net-kourier,
/// net-istio, net-contour, net-gateway-api, net-certmanager), Eventing
/// (core, in-memory channel, MT broker, job sink) and eventing-kafka.
pub const COMPONENTS: &[Component] = &[
    serving("activator", "serving-core").hpa(Some("activator-pdb")),
    serving("autoscaler", "serving-core").leader_elected(),
    serving("controller", "serving-core").leader_elected(),
    serving("webhook", "serving-core")
        .hpa(Some("webhook-pdb"))
        .leader_elected()
        .disable_ha(),
    serving("autoscaler-hpa", "serving-hpa")
        .leader_elected()
        .disable_ha(),
    serving("domain-mapping", "serving-domainmapping"),
    serving("domainmapping-webhook", "serving-domainmapping"),
    serving("net-kourier-controller", "net-kourier")
        .leader_elected()
        .disable_ha(),
    Component::new("3scale-kourier-gateway", KOURIER, "net-kourier")
        .hpa(Some("3scale-kourier-gateway-pdb")),
    serving("net-istio-controller", "net-istio")
        .leader_elected()
        .disable_ha(),
    serving("net-istio-webhook", "net-istio")
        .leader_elected()
        .disable_ha(),
    serving("net-contour-controller", "net-contour").leader_elected(),
    serving("net-gateway-api-controller", "net-gateway-api").leader_elected(),
    serving("net-gateway-api-webhook", "net-gateway-api").leader_elected(),
    serving("net-certmanager-controller", "net-certmanager").leader_elected(),
    serving("net-certmanager-webhook", "net-certmanager"),
    eventing("eventing-controller", "eventing-core").leader_elected(),
    eventing("eventing-webhook", "eventing-core")
        .hpa(Some("eventing-webhook"))
        .leader_elected(),
    eventing("pingsource-mt-adapter", "eventing-core")
        .on_demand()
        .elected_by_env(),
    eventing("job-sink", "eventing-core"),
    eventing("imc-controller", "in-memory-channel").leader_elected(),
    eventing("imc-dispatcher", "in-memory-channel").leader_elected(),
    eventing("mt-broker-controller", "mt-channel-broker").leader_elected(),
    eventing("mt-broker-filter", "mt-channel-broker").hpa(None),
    eventing("mt-broker-ingress", "mt-channel-broker").hpa(None),
    eventing("kafka-controller", "eventing-kafka"),
    eventing("kafka-webhook-eventing", "eventing-kafka"),
    eventing("kafka-broker-receiver", "eventing-kafka"),
    eventing("kafka-channel-receiver", "eventing-kafka"),
    eventing("kafka-sink-receiver", "eventing-kafka"),
];

pub fn component(name: &str) -> Option<&'static Component> {
    COMPONENTS.iter().find(|c| c.name == name)
}

/// Whether `name` is one of Knative's Deployments.
pub fn is_knative(name: &str) -> bool {
    component(name).is_some()
}

pub fn is_hpa_scaled(name: &str) -> bool {
    component(name).is_some_and(|c| c.scaling == Scaling::Hpa)
}

pub fn is_scaled_on_demand(name: &str) -> bool {
    component(name).is_some_and(|c| c.scaling == Scaling::OnDemand)
}

pub fn is_leader_elected(name: &str) -> bool {
    component(name).is_some_and(|c| c.leader_elected)
}

pub fn accepts_disable_ha(name: &str) -> bool {
    component(name).is_some_and(|c| c.disable_ha)
}

/// The namespace the release puts `name` in.
pub fn home_namespace(name: &str) -> Option<&'static str> {
    component(name).map(|c| c.namespace)
}

/// The namespaces Knative's releases install into.
pub fn namespaces() -> impl Iterator<Item = &'static str> {
    COMPONENTS
        .iter()
        .enumerate()
        .filter(|(i, c)| COMPONENTS[..*i].iter().all(|o| o.namespace != c.namespace))
        .map(|(_, c)| c.namespace)
}

pub fn names() -> impl Iterator<Item = &'static str> {
    COMPONENTS.iter().map(|c| c.name)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The components as the Markdown table docs/policy.md carries.
    fn markdown_table() -> String {
        let mut out = String::from(
            "| Deployment | namespace | release | replicas | leader election | `--disable-ha` | PDB the release ships |\n| --- | --- | --- | --- | --- | --- | --- |\n",
        );
        let yes = |b: bool| if b { "yes" } else { "" };
        let elected = |c: &Component| match (c.leader_elected, c.elected_by_env) {
            (true, _) => "yes",
            (false, true) => "yes, set in its environment by its controller",
            (false, false) => "",
        };
        for c in COMPONENTS {
            let replicas = match c.scaling {
                Scaling::Replicas => "`spec.replicas`",
                Scaling::Hpa => "its HPA",
                Scaling::OnDemand => "on demand (0 or 1)",
            };
            out.push_str(&format!(
                "| `{}` | {} | {} | {replicas} | {} | {} | {} |\n",
                c.name,
                c.namespace,
                c.release,
                elected(c),
                yes(c.disable_ha),
                c.pdb.map_or(String::new(), |p| format!("`{p}`")),
            ));
        }
        out
    }

    /// The chart's copy of [`COMPONENTS`]
    /// (`charts/knative-ha-webhook/files/knative-components.yaml`): per
    /// namespace, each Deployment and the PodDisruptionBudget its release ships
    /// (`""`: none). The chart grants the reconciler `patch` on exactly these
    /// Deployments (and their budgets) by `resourceNames`.
    fn chart_components_yaml() -> String {
        let mut out = String::from(
            "# Knative's Deployments per namespace and the PodDisruptionBudget each release ships (\"\": none).\n\
             # Generated from src/knative.rs; `cargo test` keeps the two equal and prints this file when they differ.\n",
        );
        for ns in namespaces() {
            out.push_str(&format!("{ns}:\n"));
            for c in COMPONENTS.iter().filter(|c| c.namespace == ns) {
                out.push_str(&format!("  {}: {:?}\n", c.name, c.pdb.unwrap_or("")));
            }
        }
        out
    }

    #[test]
    fn each_component_is_declared_once() {
        for (i, c) in COMPONENTS.iter().enumerate() {
            assert!(
                COMPONENTS[..i].iter().all(|o| o.name != c.name),
                "{} twice",
                c.name
            );
        }
    }

    #[test]
    fn the_namespaces_are_knatives() {
        assert_eq!(
            namespaces().collect::<Vec<_>>(),
            [SERVING, KOURIER, EVENTING]
        );
        assert_eq!(home_namespace("3scale-kourier-gateway"), Some(KOURIER));
        assert_eq!(home_namespace("imc-dispatcher"), Some(EVENTING));
        assert_eq!(home_namespace("my-app"), None);
    }

    /// docs/policy.md carries [`markdown_table`] between its markers.
    #[test]
    fn the_docs_table_is_the_declaration() {
        let doc = include_str!("../docs/policy.md");
        let begin = "<!-- components: generated from src/knative.rs -->\n";
        let table = doc
            .split_once(begin)
            .and_then(|(_, rest)| rest.split_once("<!-- components: end -->"))
            .map(|(table, _)| table);
        assert_eq!(
            table,
            Some(markdown_table().as_str()),
            "docs/policy.md's components table differs from src/knative.rs; put this between its markers:\n{}",
            markdown_table()
        );
    }

    /// The chart's `files/knative-components.yaml` is [`chart_components_yaml`].
    #[test]
    fn the_charts_components_are_the_declaration() {
        let file = include_str!("../charts/knative-ha-webhook/files/knative-components.yaml");
        assert_eq!(
            file,
            chart_components_yaml(),
            "charts/knative-ha-webhook/files/knative-components.yaml differs from src/knative.rs; write this there:\n{}",
            chart_components_yaml()
        );
    }

    #[test]
    fn flag_and_leader_election_agree() {
        // --disable-ha turns sharedmain's leader election off: only a
        // leader-elected binary has it.
        for c in COMPONENTS.iter().filter(|c| c.disable_ha) {
            assert!(c.leader_elected, "{}", c.name);
        }
    }
}

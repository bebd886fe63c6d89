//! The pod's own node filters, as the scheduler's plugins apply them before DynamicResources:
//! NodeUnschedulable, NodeAffinity (nodeSelector and required affinity), TaintToleration.

use k8s_openapi::api::core::v1::{
    Node, NodeSelector, NodeSelectorRequirement, Pod, Taint, Toleration,
};

use super::NodeInfo;
use super::findings::{Label, NodeFinding};

/// The pod's own node filters on one node, in the scheduler's plugin order: NodeUnschedulable,
/// nodeSelector and required node affinity (NodeAffinity), taints (TaintToleration).
pub(super) fn pod_filter(pod: &Pod, info: &NodeInfo, node: &Node) -> Option<NodeFinding> {
    let spec = pod.spec.as_ref()?;
    // NodeUnschedulable: a cordoned node, unless the pod tolerates the unschedulable taint.
    let cordoned = Taint {
        key: "node.kubernetes.io/unschedulable".to_owned(),
        effect: "NoSchedule".to_owned(),
        ..Default::default()
    };
    if node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true)
        && !spec
            .tolerations
            .as_deref()
            .unwrap_or_default()
            .iter()
            .any(|tol| pod_tolerates(tol, &cordoned))
    {
        return Some(NodeFinding::Cordoned);
    }
    if let Some(selector) = &spec.node_selector {
        let wants: Vec<Label> = selector
            .iter()
            .filter(|(k, v)| info.labels.get(*k) != Some(v))
            .map(|(k, v)| Label {
                key: k.clone(),
                value: v.clone(),
            })
            .collect();
        if !wants.is_empty() {
            return Some(NodeFinding::NodeSelector { wants });
        }
    }
    if let Some(required) = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        && !info.matches(required)
    {
        return Some(NodeFinding::NodeAffinity);
    }
    let tolerations = spec.tolerations.as_deref().unwrap_or_default();
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default();
    if let Some(taint) = taints.iter().find(|t| {
        matches!(t.effect.as_str(), "NoSchedule" | "NoExecute")
            && !tolerations.iter().any(|tol| pod_tolerates(tol, t))
    }) {
        return Some(NodeFinding::NodeTaint {
            key: taint.key.clone(),
            value: taint.value.clone(),
        });
    }
    None
}

/// k8s.io/api core/v1 `Toleration.ToleratesTaint`.
pub(super) fn pod_tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    if let Some(effect) = toleration.effect.as_deref().filter(|e| !e.is_empty())
        && effect != taint.effect
    {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or_default();
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or("Equal") {
        "Exists" => true,
        "Equal" | "" => {
            toleration.value.as_deref().unwrap_or_default()
                == taint.value.as_deref().unwrap_or_default()
        }
        _ => false,
    }
}

impl NodeInfo {
    /// A `NodeSelector` as the scheduler applies it (k8s.io/component-helpers
    /// `nodeaffinity`): the terms are ORed, the requirements of a term ANDed, an empty term
    /// matches nothing.
    pub(crate) fn matches(&self, selector: &NodeSelector) -> bool {
        selector.node_selector_terms.iter().any(|term| {
            let expressions = term.match_expressions.as_deref().unwrap_or_default();
            let fields = term.match_fields.as_deref().unwrap_or_default();
            if expressions.is_empty() && fields.is_empty() {
                return false;
            }
            expressions
                .iter()
                .all(|r| requirement_matches(r, self.labels.get(&r.key).map(String::as_str)))
                && fields.iter().all(|r| {
                    // metadata.name is the only field the scheduler supports for nodes.
                    let value = (r.key == "metadata.name").then_some(self.name.as_str());
                    requirement_matches(r, value)
                })
        })
    }
}

pub(super) fn requirement_matches(
    requirement: &NodeSelectorRequirement,
    value: Option<&str>,
) -> bool {
    let values = requirement.values.as_deref().unwrap_or_default();
    let number = |s: &str| s.parse::<i64>().ok();
    match requirement.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => value.is_none_or(|v| values.iter().all(|x| x != v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(have), Some(want)) = (
                value.and_then(number),
                values.first().and_then(|v| number(v)),
            ) else {
                return false;
            };
            if requirement.operator == "Gt" {
                have > want
            } else {
                have < want
            }
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::NodeSelectorTerm;

    fn node() -> NodeInfo {
        NodeInfo {
            name: "gpu-1".into(),
            labels: [
                ("zone".to_owned(), "a".to_owned()),
                ("gen".to_owned(), "12".to_owned()),
            ]
            .into_iter()
            .collect(),
        }
    }

    fn req(key: &str, op: &str, values: &[&str]) -> NodeSelectorRequirement {
        NodeSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: Some(values.iter().map(|v| v.to_string()).collect()),
        }
    }

    fn selector(
        terms: Vec<(Vec<NodeSelectorRequirement>, Vec<NodeSelectorRequirement>)>,
    ) -> NodeSelector {
        NodeSelector {
            node_selector_terms: terms
                .into_iter()
                .map(|(e, f)| NodeSelectorTerm {
                    match_expressions: Some(e),
                    match_fields: Some(f),
                })
                .collect(),
        }
    }

    #[test]
    fn node_selectors_follow_the_scheduler() {
        let n = node();
        assert!(n.matches(&selector(vec![(
            vec![req("zone", "In", &["a", "b"])],
            vec![]
        )])));
        assert!(!n.matches(&selector(vec![(
            vec![req("zone", "NotIn", &["a"])],
            vec![]
        )])));
        assert!(n.matches(&selector(vec![(
            vec![req("rack", "NotIn", &["x"])],
            vec![]
        )])));
        assert!(n.matches(&selector(vec![(vec![req("gen", "Gt", &["11"])], vec![])])));
        assert!(!n.matches(&selector(vec![(vec![req("gen", "Lt", &["11"])], vec![])])));
        assert!(n.matches(&selector(vec![(
            vec![],
            vec![req("metadata.name", "In", &["gpu-1"])]
        )])));
        // An empty term matches nothing; terms are ORed.
        assert!(!n.matches(&selector(vec![(vec![], vec![])])));
        assert!(n.matches(&selector(vec![
            (vec![req("zone", "In", &["z"])], vec![]),
            (vec![req("zone", "Exists", &[])], vec![]),
        ])));
    }
}

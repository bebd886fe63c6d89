//! Why a pod's (or one claim's) devices are not allocated, from the objects alone: the
//! objects come in (read by `fleet`), a [`Diagnosis`] of typed findings comes out, and
//! `cli::why` words it. The order follows the way a pod meets DRA: the target and its claims
//! ([`super::target`], [`super::claims`]), the allocator node by node ([`super::evaluate`]),
//! every device per request ([`super::requests`]), then the verdict and next steps.

use std::collections::BTreeMap;

use k8s_openapi::api::resource::v1::DeviceClassSpec;

use super::claims::{self, Entry, Sorted};
use super::evaluate::evaluate;
use super::findings::{ClaimProblem, ClaimState, Diagnosis, Note, Unchecked, Verdict};
use super::model::{self, FleetModel};
use super::next_steps;
use super::requests::gpu_models;
use super::target::{self, Found};
pub(crate) use super::target::{Input, Target, TargetError, similar};
use super::verdict::{conclude, scheduler_words};
use super::work::Work;
use crate::fleet::objects::Kind;

/// Explains the target.
pub(crate) fn explain(input: &Input<'_>) -> Result<Diagnosis, TargetError> {
    let objects = input.objects;
    let namespace = input.target.namespace();
    let Found {
        kind,
        name,
        pod,
        entries,
        used_by,
        unread_user,
    } = target::resolve(input)?;
    let classes: BTreeMap<String, DeviceClassSpec> = objects
        .classes
        .iter()
        .map(|c| (c.metadata.name.clone().unwrap_or_default(), c.spec.clone()))
        .collect();
    let model = model::build(
        &objects.slices,
        &objects.claims,
        &objects.nodes,
        &objects.taint_rules,
        input.features,
        input.threads,
    );
    let models = gpu_models(&model);
    let mut sorted = claims::sort(&entries, namespace, &model);
    claims::check_classes(&mut sorted, &classes);
    if input.unread.iter().any(|(k, _)| *k == Kind::DeviceClass) {
        // Without the classes nothing can be evaluated; the note says so.
        sorted.problems.retain(|p| !p.names_missing_object());
        for report in &mut sorted.reports {
            report.problem = report.problem.take().filter(|p| !p.names_missing_object());
        }
    }
    let Sorted {
        reports,
        problems,
        pending,
        bound_nodes,
    } = sorted;

    let mut diagnosis = Diagnosis {
        kind,
        name: format!("{namespace}/{name}"),
        blocked: false,
        // Decided by `conclude`.
        verdict: Verdict::Allocatable {
            allocatable: 0,
            total: 0,
        },
        claims: reports,
        nodes: None,
        attempt_error: None,
        scheduler: scheduler_words(pod, &objects.events),
        used_by,
        next_steps: Vec::new(),
        unchecked: Vec::new(),
        notes: unread_notes(input, &entries),
    };
    if !pending.is_empty() {
        unchecked(input, &model, unread_user, &mut diagnosis);
    }
    let class_problem = problems.iter().any(ClaimProblem::names_missing_object);
    let can_evaluate = !pending.is_empty()
        && !class_problem
        && !input.unread.iter().any(|(k, _)| *k == Kind::DeviceClass);
    if can_evaluate {
        let work = Work {
            input,
            model: &model,
            models: &models,
            classes: &classes,
            pod,
            pending: &pending,
            bound_nodes: &bound_nodes,
        };
        evaluate(&work, &mut diagnosis);
    }
    conclude(&mut diagnosis, pod, &problems, &pending);
    diagnosis.next_steps = next_steps::steps(&diagnosis, &diagnosis.verdict, pod, &problems);
    super::claims::mark_sub_devices(&mut diagnosis, &model);
    Ok(diagnosis)
}

/// The kinds that could not be read, as notes (templates only for claims not created yet).
fn unread_notes(input: &Input<'_>, entries: &[Entry<'_>]) -> Vec<Note> {
    let not_created = entries.iter().any(|e| e.state == ClaimState::NotCreated);
    input
        .unread
        .iter()
        .filter(|(kind, _)| *kind != Kind::ResourceClaimTemplate || not_created)
        .map(|(kind, why)| match kind {
            // Claims are only ever unread outside the namespace (`cli::why` falls back to it;
            // without the pod's own claims there is nothing to explain).
            Kind::ResourceClaim if input.objects.claims.is_empty() => {
                Note::ClaimsUnread { why: why.clone() }
            }
            Kind::ResourceClaim => Note::ClaimsOutsideUnread {
                namespace: input.target.namespace().to_owned(),
                why: why.clone(),
            },
            _ => Note::Unread {
                kind: *kind,
                why: why.clone(),
            },
        })
        .collect()
}

/// What was not read and could still block the claims still to allocate.
fn unchecked(
    input: &Input<'_>,
    model: &FleetModel<'_>,
    unread_user: Option<Unchecked>,
    diagnosis: &mut Diagnosis,
) {
    if !model.nodes_known {
        diagnosis.unchecked.push(Unchecked::NodeFilters);
        // Nodes that could not be read have their note already; a list that came back empty
        // is said here.
        if !input.unread.iter().any(|(k, _)| *k == Kind::Node) {
            diagnosis.notes.push(Note::NoNodes);
        }
    }
    if let Some(user) = unread_user {
        diagnosis.notes.push(Note::NotChecked {
            unchecked: user.clone(),
        });
        diagnosis.unchecked.push(user);
    }
    if !model.ignored_slices.is_empty() {
        diagnosis.notes.push(Note::SlicesSkipped {
            release: input.features.release,
            slices: model.ignored_slices.clone(),
        });
    }
    if input.unread.iter().any(|(k, _)| *k == Kind::ResourceClaim) {
        diagnosis
            .unchecked
            .push(if input.objects.claims.is_empty() {
                Unchecked::OtherClaims
            } else {
                Unchecked::ClaimsOutside {
                    namespace: input.target.namespace().to_owned(),
                }
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::why::words;
    use crate::explain::allocate::Features;
    use crate::explain::evaluate::num_feasible_nodes_to_find;
    use crate::explain::findings::{OutcomeKind, ReasonKind, Step};
    use crate::explain::model::tests::objects;

    // The tests read the diagnosis as `why` words it: the sentences are what a person checks.
    fn steps(d: &Diagnosis) -> Vec<String> {
        d.next_steps.iter().map(words::step).collect()
    }
    fn notes(d: &Diagnosis) -> Vec<String> {
        d.notes.iter().map(words::note).collect()
    }
    fn unchecked(d: &Diagnosis) -> Vec<String> {
        d.unchecked.iter().map(words::unchecked).collect()
    }

    /// Two nodes, a GPU each with its render node: n1's decodes and scales 10-bit, n2's only
    /// decodes.
    const FLEET: &str = r#"
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: n1-liken}
spec:
  driver: liken.sh
  nodeName: n1
  pool: {name: n1, generation: 1, resourceSliceCount: 1}
  devices:
  - name: renderd128
    allowMultipleAllocations: true
    attributes:
      renderNode: {string: /dev/dri/renderD128}
      resource.kubernetes.io/pciBusID: {string: "0000:03:00.0"}
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: n1-media}
spec:
  driver: media.liken.sh
  nodeName: n1
  pool: {name: n1, generation: 1, resourceSliceCount: 1}
  devices:
  - name: gpu-a
    allowMultipleAllocations: true
    attributes:
      name: {string: Arc A770}
      decodeHEVCMain10: {bool: true}
      scale10bit: {bool: true}
      resource.kubernetes.io/pciBusID: {string: "0000:03:00.0"}
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: n2-liken}
spec:
  driver: liken.sh
  nodeName: n2
  pool: {name: n2, generation: 1, resourceSliceCount: 1}
  devices:
  - name: renderd128
    allowMultipleAllocations: true
    attributes:
      renderNode: {string: /dev/dri/renderD128}
      resource.kubernetes.io/pciBusID: {string: "0000:00:02.0"}
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: n2-media}
spec:
  driver: media.liken.sh
  nodeName: n2
  pool: {name: n2, generation: 1, resourceSliceCount: 1}
  devices:
  - name: gpu-b
    allowMultipleAllocations: true
    attributes:
      name: {string: UHD 630}
      decodeHEVCMain10: {bool: true}
      scale10bit: {bool: false}
      resource.kubernetes.io/pciBusID: {string: "0000:00:02.0"}
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: decode-10bit}
spec:
  selectors:
  - cel:
      expression: |
        device.driver == "media.liken.sh" &&
        device.attributes["media.liken.sh"].decodeHEVCMain10 &&
        device.attributes["media.liken.sh"].scale10bit
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu-render}
spec:
  selectors:
  - cel: {expression: 'device.driver == "liken.sh"'}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: t, namespace: media}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {deviceClassName: gpu-render}
      - name: decodes
        exactly: {deviceClassName: decode-10bit}
      constraints:
      - {requests: [gpu, decodes], matchAttribute: resource.kubernetes.io/pciBusID}
"#;

    fn pod(extra_status: &str) -> String {
        format!(
            r#"
---
apiVersion: v1
kind: Pod
metadata: {{name: p, namespace: media, uid: pod-uid}}
spec:
  resourceClaims: [{{name: gpu, resourceClaimTemplateName: t}}]
  containers: [{{name: c, image: i}}]
status:
  phase: Pending
{extra_status}
"#
        )
    }

    fn claim(name: &str, spec: &str, extra: &str) -> String {
        format!(
            r#"
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: {name}
  namespace: media
  ownerReferences: [{{apiVersion: v1, kind: Pod, name: p, uid: pod-uid, controller: true}}]
{extra}
spec:
{spec}
"#
        )
    }

    const SPEC: &str = r#"  devices:
    requests:
    - name: gpu
      exactly: {deviceClassName: gpu-render}
    - name: decodes
      exactly: {deviceClassName: decode-10bit}
    constraints:
    - {requests: [gpu, decodes], matchAttribute: resource.kubernetes.io/pciBusID}"#;

    const STATUS: &str = "  resourceClaimStatuses: [{name: gpu, resourceClaimName: p-gpu-x}]";

    fn explain_pod(text: &str) -> Result<Diagnosis, TargetError> {
        let objects = objects(text);
        explain(&Input {
            objects: &objects,
            target: &Target::Pod {
                namespace: "media".into(),
                name: "p".into(),
            },
            features: Features::default(),
            unread: &[],
            every_device: false,
            threads: 4,
        })
    }

    fn outcome_kinds(d: &Diagnosis) -> Vec<(OutcomeKind, Vec<String>)> {
        d.nodes
            .as_ref()
            .expect("nodes")
            .outcomes
            .iter()
            .map(|o| (o.outcome, o.nodes.clone()))
            .collect()
    }

    #[test]
    fn a_pending_claim_allocatable_on_one_node() {
        let d = explain_pod(&format!(
            "{FLEET}{}{}",
            pod(STATUS),
            claim("p-gpu-x", SPEC, "")
        ))
        .unwrap();
        assert!(!d.blocked, "{d:#?}");
        assert_eq!(d.claims[0].state, ClaimState::Pending);
        let decodes = &d.claims[0].requests[1];
        assert_eq!(
            (decodes.qualifying, decodes.available, decodes.total),
            (1, 1, 4)
        );
        // gpu-b: the first false clause with the value it read.
        let reason = decodes
            .reasons
            .iter()
            .find(|r| r.reason == ReasonKind::SelectorFalse)
            .expect("a false clause");
        assert_eq!(words::detail(&reason.detail), "scale10bit is false");
        assert_eq!(reason.model, "UHD 630");
        assert_eq!(
            reason.at.as_ref().and_then(|at| at.clause.as_deref()),
            Some(r#"device.attributes["media.liken.sh"].scale10bit"#)
        );
        assert_eq!(
            outcome_kinds(&d),
            [
                (OutcomeKind::Allocatable, vec!["n1".to_owned()]),
                (OutcomeKind::RequestUnsatisfied, vec!["n2".to_owned()]),
            ]
        );
    }

    /// A GPU that NVIDIA's driver publishes only as MIG devices (static MIG: no `gpu-0`), at the
    /// media device's address; `class` is the render request's class.
    fn mig_fleet(class: &str) -> String {
        format!(
            r#"
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {{name: n1-media.liken.sh}}
spec:
  driver: media.liken.sh
  nodeName: n1
  pool: {{name: n1, generation: 1, resourceSliceCount: 1}}
  devices:
  - name: pci-0000-03-00-0
    allowMultipleAllocations: true
    attributes:
      decodeHEVCMain10: {{bool: true}}
      resource.kubernetes.io/pciBusID: {{string: "0000:03:00.0"}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {{name: n1-gpu.nvidia.com-x}}
spec:
  driver: gpu.nvidia.com
  nodeName: n1
  pool: {{name: n1, generation: 1, resourceSliceCount: 1}}
  devices:
  - name: gpu-0-mig-1g10gb-9-0
    attributes:
      type: {{string: mig}}
      resource.kubernetes.io/pciBusID: {{string: "0000:03:00.0"}}
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {{name: decodes-hevc10}}
spec:
  selectors:
  - cel: {{expression: 'device.attributes["media.liken.sh"].decodeHEVCMain10'}}
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {{name: render}}
spec:
  selectors:
  - cel: {{expression: '{class}'}}
"#
        )
    }

    const MIG_SPEC: &str = r#"  devices:
    requests:
    - name: gpu
      exactly: {deviceClassName: render}
    - name: decodes
      exactly: {deviceClassName: decodes-hevc10}
    constraints:
    - {requests: [gpu, decodes], matchAttribute: resource.kubernetes.io/pciBusID}"#;

    #[test]
    fn a_render_request_that_lands_on_a_mig_device_is_told_so() {
        let any = mig_fleet(r#"device.driver == "gpu.nvidia.com""#);
        let d = explain_pod(&format!(
            "{any}{}{}",
            pod(STATUS),
            claim("p-gpu-x", MIG_SPEC, "")
        ))
        .unwrap();
        let picks = &d.nodes.as_ref().expect("nodes").picks;
        let gpu = picks[0]
            .devices
            .iter()
            .find(|p| p.request == "gpu")
            .unwrap();
        assert_eq!(gpu.device, "gpu-0-mig-1g10gb-9-0");
        assert_eq!(gpu.sub_device, Some(crate::render_drivers::DeviceKind::Mig));
        let step = d
            .next_steps
            .iter()
            .find(|s| matches!(s, Step::SubDevice { .. }))
            .unwrap_or_else(|| panic!("{:#?}", d.next_steps));
        let text = words::step(step);
        assert!(text.starts_with("request gpu of claim media/p-gpu-x would land on (on node n1) gpu.nvidia.com device gpu-0-mig-1g10gb-9-0, a MIG device"), "{text}");
        assert!(text.contains("--render-driver gpu.nvidia.com"), "{text}");

        // Through the table's class of whole GPUs, the MIG device never pairs.
        let whole = crate::render_drivers::NVIDIA
            .whole_gpu_cel()
            .replace('\n', " ");
        let d = explain_pod(&format!(
            "{}{}{}",
            mig_fleet(&whole),
            pod(STATUS),
            claim("p-gpu-x", MIG_SPEC, "")
        ))
        .unwrap();
        assert!(
            d.nodes.as_ref().is_some_and(|n| n.picks.is_empty()),
            "{d:#?}"
        );
        assert!(
            !d.next_steps
                .iter()
                .any(|s| matches!(s, Step::SubDevice { .. }))
        );
    }

    #[test]
    fn allocatable_is_never_said_on_what_was_not_read() {
        let event = r#"
---
apiVersion: v1
kind: Event
metadata: {name: p.3, namespace: media}
involvedObject: {kind: Pod, name: p, namespace: media}
reason: FailedScheduling
message: "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 cannot allocate all claims. still not schedulable, preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
"#;
        // No Node objects: the node side is unchecked, and the scheduler's reason is named.
        let text = format!(
            "{FLEET}{}{}{event}",
            pod(STATUS),
            claim("p-gpu-x", SPEC, "")
        );
        let d = explain_pod(&text).unwrap();
        assert!(!d.blocked);
        assert_eq!(unchecked(&d).len(), 1, "{:?}", unchecked(&d));
        assert!(
            words::verdict(&d).starts_with(
                "undecided for pod media/p: the devices allow its claims on 1 of 2 nodes (n1)"
            ),
            "{}",
            words::verdict(&d)
        );
        assert!(
            steps(&d)[0].starts_with(
                "the scheduler says \"1 node(s) didn't match Pod's node affinity/selector\""
            ),
            "{:?}",
            steps(&d)
        );
        // With the nodes: allocatable, and the disagreement with the scheduler is said.
        let nodes = "\n---\napiVersion: v1\nkind: Node\nmetadata: {name: n1}\n---\napiVersion: v1\nkind: Node\nmetadata: {name: n2}\n";
        let d = explain_pod(&format!("{text}{nodes}")).unwrap();
        assert!(unchecked(&d).is_empty(), "{:?}", unchecked(&d));
        assert!(
            words::verdict(&d).starts_with("nothing in the fleet blocks pod media/p"),
            "{}",
            words::verdict(&d)
        );
        assert!(
            steps(&d)[0].starts_with("this is not what the scheduler last said"),
            "{:?}",
            steps(&d)
        );
        // Claims of other namespaces not read: a device they hold may be taken. Undecided.
        let objects = objects(&format!("{text}{nodes}"));
        let d = explain(&Input {
            objects: &objects,
            target: &Target::Pod {
                namespace: "media".into(),
                name: "p".into(),
            },
            features: Features::default(),
            unread: &[(Kind::ResourceClaim, "forbidden".to_owned())],
            every_device: false,
            threads: 4,
        })
        .unwrap();
        assert!(!d.blocked);
        assert_eq!(
            unchecked(&d),
            ["devices held by claims outside the namespace media, as those claims were not read"]
        );
        assert!(
            words::verdict(&d).starts_with("undecided for pod media/p"),
            "{}",
            words::verdict(&d)
        );
    }

    #[test]
    fn a_template_not_read_is_not_said_missing() {
        // The pod's claim is not created yet and its template is not among the objects.
        let text = FLEET.replace(
            "kind: ResourceClaimTemplate\nmetadata: {name: t,",
            "kind: ResourceClaimTemplate\nmetadata: {name: other,",
        );
        assert_ne!(text, FLEET);
        let text = format!("{text}{}", pod(""));
        let objects = objects(&text);
        let explain_with = |unread: &[(Kind, String)]| {
            explain(&Input {
                objects: &objects,
                target: &Target::Pod {
                    namespace: "media".into(),
                    name: "p".into(),
                },
                features: Features::default(),
                unread,
                every_device: false,
                threads: 4,
            })
            .unwrap()
        };
        // Read, and not there: it does not exist.
        let d = explain_with(&[]);
        assert!(
            words::verdict(&d).contains("ResourceClaimTemplate media/t does not exist"),
            "{}",
            words::verdict(&d)
        );
        // Not read: the claim is not created yet, and what it asks for is not evaluated.
        let d = explain_with(&[(Kind::ResourceClaimTemplate, "forbidden".to_owned())]);
        assert!(d.blocked);
        assert!(
            !words::verdict(&d).contains("does not exist"),
            "{}",
            words::verdict(&d)
        );
        assert!(
            words::verdict(&d).contains("its template media/t was not read"),
            "{}",
            words::verdict(&d)
        );
        assert_eq!(
            notes(&d)[0],
            "resourceclaimtemplates were not read (forbidden): claims not created yet cannot be evaluated"
        );
        // A claim that exists needs no template: no note.
        let text = format!("{FLEET}{}{}", pod(STATUS), claim("p-gpu-x", SPEC, ""));
        let objects = crate::explain::model::tests::objects(&text);
        let d = explain(&Input {
            objects: &objects,
            target: &Target::Pod {
                namespace: "media".into(),
                name: "p".into(),
            },
            features: Features::default(),
            unread: &[(Kind::ResourceClaimTemplate, "forbidden".to_owned())],
            every_device: false,
            threads: 4,
        })
        .unwrap();
        assert!(
            !notes(&d)
                .iter()
                .any(|n| n.contains("resourceclaimtemplates")),
            "{:?}",
            notes(&d)
        );
    }

    #[test]
    fn the_silent_cases_are_named() {
        // Not created yet: no status entry. The template's requests are still evaluated.
        let d = explain_pod(&format!("{FLEET}{}", pod(""))).unwrap();
        assert_eq!(d.claims[0].state, ClaimState::NotCreated);
        assert!(d.blocked);
        assert!(
            words::verdict(&d).contains("not created yet"),
            "{}",
            words::verdict(&d)
        );
        assert_eq!(d.claims[0].requests.len(), 2);

        // ... and the claim controller's complaint, when there is one, leads the steps.
        let event = r#"
---
apiVersion: v1
kind: Event
metadata: {name: p.2, namespace: media}
involvedObject: {kind: Pod, name: p, namespace: media}
reason: FailedResourceClaimCreation
message: 'PodResourceClaim gpu: resourceclaims.resource.k8s.io is forbidden: exceeded quota'
"#;
        let d = explain_pod(&format!("{FLEET}{}{event}", pod(""))).unwrap();
        assert!(
            steps(&d)[0].contains("the resource claim controller says: PodResourceClaim gpu:"),
            "{:?}",
            steps(&d)
        );

        // The status names a claim that does not exist.
        let d = explain_pod(&format!("{FLEET}{}", pod(STATUS))).unwrap();
        assert_eq!(d.claims[0].state, ClaimState::Missing);
        assert!(
            words::verdict(&d).contains("does not exist"),
            "{}",
            words::verdict(&d)
        );

        // Being deleted.
        let deleting = "  deletionTimestamp: 2026-11-02T09:00:00Z";
        let d = explain_pod(&format!(
            "{FLEET}{}{}",
            pod(STATUS),
            claim("p-gpu-x", SPEC, deleting)
        ))
        .unwrap();
        assert_eq!(d.claims[0].state, ClaimState::BeingDeleted);
        assert!(
            words::verdict(&d).contains("being deleted"),
            "{}",
            words::verdict(&d)
        );

        // Not owned by the pod (another pod's uid).
        let other = claim("p-gpu-x", SPEC, "").replace("uid: pod-uid", "uid: other-uid");
        let d = explain_pod(&format!("{FLEET}{}{other}", pod(STATUS))).unwrap();
        assert_eq!(d.claims[0].state, ClaimState::NotOwned);
        assert!(
            words::verdict(&d).contains("not created for pod"),
            "{}",
            words::verdict(&d)
        );

        // The template does not exist.
        let text = format!("{FLEET}{}", pod("")).replace(
            "resourceClaimTemplateName: t",
            "resourceClaimTemplateName: t2",
        );
        let d = explain_pod(&text).unwrap();
        assert!(
            words::verdict(&d).contains("ResourceClaimTemplate media/t2 does not exist"),
            "{}",
            words::verdict(&d)
        );
    }

    #[test]
    fn a_missing_class_is_named_with_the_nearest() {
        let spec = SPEC.replace(
            "deviceClassName: decode-10bit",
            "deviceClassName: decode-10bits",
        );
        let d = explain_pod(&format!(
            "{FLEET}{}{}",
            pod(STATUS),
            claim("p-gpu-x", &spec, "")
        ))
        .unwrap();
        assert!(d.blocked);
        assert_eq!(
            words::verdict(&d),
            "pod media/p waits: claim media/p-gpu-x: request decodes: device class decode-10bits does not exist."
        );
        assert!(
            steps(&d)[0].contains("did you mean decode-10bit?"),
            "{:?}",
            steps(&d)
        );
    }

    #[test]
    fn an_allocated_claim_shows_what_it_got() {
        let allocated = r#"status:
  allocation:
    devices:
      results:
      - {request: gpu, driver: liken.sh, pool: n1, device: renderd128}
      - {request: decodes, driver: media.liken.sh, pool: n1, device: gpu-a}
    nodeSelector:
      nodeSelectorTerms: [{matchFields: [{key: metadata.name, operator: In, values: [n1]}]}]
  reservedFor: [{resource: pods, name: p, uid: pod-uid}]"#;
        let text = format!("{FLEET}{}{}", pod(STATUS), claim("p-gpu-x", SPEC, "")) + allocated;
        let running = text.replace("phase: Pending", "phase: Running");
        let d = explain_pod(&running).unwrap();
        assert!(!d.blocked);
        assert_eq!(d.claims[0].state, ClaimState::Reserved);
        let allocation = d.claims[0].allocation.as_ref().unwrap();
        assert_eq!(allocation.node.as_deref(), Some("n1"));
        assert_eq!(
            allocation.devices[0].render_node.as_deref(),
            Some("/dev/dri/renderD128")
        );
        assert_eq!(
            allocation.devices[1].pci_bus_id.as_deref(),
            Some("0000:03:00.0")
        );
        assert!(d.nodes.is_none());

        // Still Pending with the kubelet's complaint: the verdict points at the kubelet.
        let event = r#"
---
apiVersion: v1
kind: Event
metadata: {name: p.1, namespace: media}
involvedObject: {kind: Pod, name: p, namespace: media}
reason: FailedPrepareDynamicResources
message: 'Failed to prepare dynamic resources: DRA driver media.liken.sh is not registered'
count: 3
"#;
        let d = explain_pod(&(text + event)).unwrap();
        assert!(!d.blocked);
        assert!(
            words::verdict(&d).contains("the kubelet there cannot prepare them"),
            "{}",
            words::verdict(&d)
        );
        assert!(
            words::verdict(&d).contains("not registered"),
            "{}",
            words::verdict(&d)
        );
    }

    #[test]
    fn taken_devices_name_the_claims_that_hold_them() {
        // Exclusive render nodes (no allowMultipleAllocations), n1's held by another claim.
        let fleet = FLEET.replace(
            "    allowMultipleAllocations: true\n    attributes:\n      renderNode",
            "    attributes:\n      renderNode",
        );
        let other = r#"
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: other, namespace: batch}
spec: {}
status:
  allocation:
    devices:
      results: [{request: r, driver: liken.sh, pool: n1, device: renderd128}]
"#;
        let d = explain_pod(&format!(
            "{fleet}{}{}{other}",
            pod(STATUS),
            claim("p-gpu-x", SPEC, "")
        ))
        .unwrap();
        assert!(d.blocked, "{d:#?}");
        let gpu = &d.claims[0].requests[0];
        assert_eq!((gpu.qualifying, gpu.available), (2, 1));
        let taken = gpu
            .reasons
            .iter()
            .find(|r| r.reason == ReasonKind::Taken)
            .unwrap();
        assert_eq!(taken.claims, ["batch/other"]);
        assert_eq!(taken.model, "Arc A770");
    }

    #[test]
    fn the_pod_s_own_allocated_claim_holds_its_device() {
        // Claim a holds n1's only GPU (no share ID); claim b, pending, wants one more. The
        // scheduler counts every allocated claim's devices as in use, the pod's own too.
        let text = r#"
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: n1}
spec:
  driver: media.liken.sh
  nodeName: n1
  pool: {name: n1, generation: 1, resourceSliceCount: 1}
  devices: [{name: gpu0}]
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: media}
spec:
  selectors: [{cel: {expression: 'device.driver == "media.liken.sh"'}}]
---
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: media, uid: pod-uid}
spec:
  resourceClaims: [{name: a, resourceClaimName: a}, {name: b, resourceClaimName: b}]
  containers: [{name: c, image: i}]
status: {phase: Pending}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: a, namespace: media}
spec:
  devices:
    requests: [{name: r, exactly: {deviceClassName: media}}]
status:
  allocation:
    devices:
      results: [{request: r, driver: media.liken.sh, pool: n1, device: gpu0}]
    nodeSelector:
      nodeSelectorTerms: [{matchFields: [{key: metadata.name, operator: In, values: [n1]}]}]
  reservedFor: [{resource: pods, name: p, uid: pod-uid}]
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: b, namespace: media}
spec:
  devices:
    requests: [{name: r, exactly: {deviceClassName: media}}]
"#;
        let d = explain_pod(text).unwrap();
        assert!(d.blocked, "{d:#?}");
        assert_eq!(
            outcome_kinds(&d),
            [(OutcomeKind::RequestUnsatisfied, vec!["n1".to_owned()])]
        );
        let taken = d.claims[1].requests[0]
            .reasons
            .iter()
            .find(|r| r.reason == ReasonKind::Taken)
            .expect("gpu0 is taken");
        assert_eq!(taken.claims, ["media/a"]);
    }

    #[test]
    fn the_pod_s_node_filters_rule_nodes_out() {
        let nodes = r#"
---
apiVersion: v1
kind: Node
metadata: {name: n1, labels: {pool: edge}}
spec:
  taints: [{key: dedicated, value: edge, effect: NoSchedule}]
---
apiVersion: v1
kind: Node
metadata: {name: n2, labels: {pool: dc}}
spec: {}
"#;
        let d = explain_pod(&format!(
            "{FLEET}{nodes}{}{}",
            pod(STATUS),
            claim("p-gpu-x", SPEC, "")
        ))
        .unwrap();
        assert!(d.blocked);
        assert_eq!(
            outcome_kinds(&d),
            [
                (OutcomeKind::NodeTaint, vec!["n1".to_owned()]),
                (OutcomeKind::RequestUnsatisfied, vec!["n2".to_owned()]),
            ]
        );
        // Tolerated, the taint does not count; a nodeSelector does.
        let tolerant = pod(STATUS).replace(
            "  containers:",
            "  tolerations: [{key: dedicated, operator: Exists}]\n  nodeSelector: {pool: dc}\n  containers:",
        );
        let d = explain_pod(&format!(
            "{FLEET}{nodes}{tolerant}{}",
            claim("p-gpu-x", SPEC, "")
        ))
        .unwrap();
        assert_eq!(
            outcome_kinds(&d)[0],
            (OutcomeKind::NodeSelector, vec!["n1".to_owned()])
        );
    }

    #[test]
    fn unknown_names_and_relaxations_lead_somewhere() {
        let spec = SPEC.replace(
            "exactly: {deviceClassName: decode-10bit}",
            "exactly: {deviceClassName: decode-10bit, selectors: [{cel: {expression: 'device.attributes[\"media.liken.sh\"].?decodeAv1Main.orValue(false)'}}]}",
        );
        let d = explain_pod(&format!(
            "{FLEET}{}{}",
            pod(STATUS),
            claim("p-gpu-x", &spec, "")
        ))
        .unwrap();
        assert!(d.blocked);
        let decodes = &d.claims[0].requests[1];
        assert_eq!(decodes.unknown_attributes.len(), 1);
        assert_eq!(
            decodes.unknown_attributes[0].attribute,
            "media.liken.sh/decodeAv1Main"
        );
        assert!(
            steps(&d)[0].contains("no device in the fleet has media.liken.sh/decodeAv1Main"),
            "{:?}",
            steps(&d)
        );
        // Dropping the request's clause lets gpu-a qualify.
        let relaxation = &decodes.relaxations[0];
        assert_eq!(words::selector(&relaxation.selector), "request selector #0");
        assert_eq!((relaxation.qualifying, relaxation.available), (1, 1));
    }

    #[test]
    fn a_cel_runtime_error_fails_the_attempt() {
        let fleet = FLEET.replace(
            "device.attributes[\"media.liken.sh\"].scale10bit\n",
            "device.attributes[\"media.liken.sh\"].scale10Bit\n",
        );
        let d = explain_pod(&format!(
            "{fleet}{}{}",
            pod(STATUS),
            claim("p-gpu-x", SPEC, "")
        ))
        .unwrap();
        assert!(d.blocked);
        let error = d.attempt_error.as_ref().expect("the attempt fails");
        assert_eq!(
            error.message,
            "class decode-10bit: selector #0: CEL runtime error: no such key: scale10Bit"
        );
        assert!(
            steps(&d)[0].contains("did you mean media.liken.sh/scale10bit?"),
            "{:?}",
            steps(&d)
        );
    }

    /// A slice for node `node` with one media.liken.sh GPU, `decode: true` or no `decode`.
    fn one_gpu(node: &str, decode: bool) -> String {
        let attributes = if decode {
            "{decode: {bool: true}}"
        } else {
            "{}"
        };
        format!(
            r#"
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {{name: {node}}}
spec:
  driver: media.liken.sh
  nodeName: {node}
  pool: {{name: {node}, generation: 1, resourceSliceCount: 1}}
  devices: [{{name: gpu0, attributes: {attributes}}}]
"#
        )
    }

    /// A class reading `decode` unguarded, a pod and its pending claim of that class.
    const DECODE: &str = r#"
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: decode}
spec:
  selectors: [{cel: {expression: 'device.attributes["media.liken.sh"].decode'}}]
---
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: media, uid: pod-uid}
spec:
  resourceClaims: [{name: b, resourceClaimName: b}]
  containers: [{name: c, image: i}]
status: {phase: Pending}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: b, namespace: media}
spec:
  devices:
    requests: [{name: r, exactly: {deviceClassName: decode}}]
"#;

    #[test]
    fn a_runtime_error_on_a_node_the_pod_s_filters_reject_does_not_count() {
        // n1's GPU lacks `decode` (a runtime error), but n1 carries a taint the pod does not
        // tolerate: TaintToleration rejects it before DynamicResources runs there.
        let nodes = r#"
---
apiVersion: v1
kind: Node
metadata: {name: n1}
spec:
  taints: [{key: dedicated, value: edge, effect: NoSchedule}]
---
apiVersion: v1
kind: Node
metadata: {name: n2}
spec: {}
"#;
        let text = format!(
            "{}{}{nodes}{DECODE}",
            one_gpu("n1", false),
            one_gpu("n2", true)
        );
        let d = explain_pod(&text).unwrap();
        assert!(d.attempt_error.is_none(), "{:?}", d.attempt_error);
        assert!(!d.blocked, "{}", words::verdict(&d));
        assert_eq!(
            outcome_kinds(&d),
            [
                (OutcomeKind::Allocatable, vec!["n2".to_owned()]),
                (OutcomeKind::NodeTaint, vec!["n1".to_owned()]),
            ]
        );
        // A cordoned node is not checked either (NodeUnschedulable).
        let cordoned = text.replace(
            "  taints: [{key: dedicated, value: edge, effect: NoSchedule}]",
            "  unschedulable: true",
        );
        let d = explain_pod(&cordoned).unwrap();
        assert!(d.attempt_error.is_none(), "{:?}", d.attempt_error);
        assert_eq!(
            outcome_kinds(&d)[1],
            (OutcomeKind::NodeTaint, vec!["n1".to_owned()])
        );
        // Tolerated, n1 is checked and the error fails every attempt.
        let tolerant = text.replace(
            "  containers:",
            "  tolerations: [{operator: Exists}]\n  containers:",
        );
        let d = explain_pod(&tolerant).unwrap();
        let error = d.attempt_error.as_ref().expect("the attempt fails");
        assert!(error.always);
        assert!(
            words::verdict(&d).starts_with("every scheduling attempt"),
            "{}",
            words::verdict(&d)
        );
    }

    #[test]
    fn before_1_36_the_pool_order_is_not_fixed() {
        let text = format!("{}{}{DECODE}", one_gpu("n1", false), one_gpu("n2", true));
        let objects = objects(&text);
        let explain_for = |minor| {
            explain(&Input {
                objects: &objects,
                target: &Target::Pod {
                    namespace: "media".into(),
                    name: "p".into(),
                },
                features: Features::for_minor(minor),
                unread: &[],
                every_device: false,
                threads: 4,
            })
            .unwrap()
        };
        let old = explain_for(35);
        assert!(old.attempt_error.is_some());
        assert!(
            notes(&old).iter().any(|n| n.contains("in no fixed order")),
            "{:?}",
            notes(&old)
        );
        assert!(
            !notes(&explain_for(36))
                .iter()
                .any(|n| n.contains("in no fixed order"))
        );
    }

    /// One slice with perDeviceNodeSelection: gpu-n2 (for n2, without `decode`) listed
    /// before gpu-n1 (for n1, with it).
    const PER_DEVICE: &str = r#"
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: shared}
spec:
  driver: media.liken.sh
  perDeviceNodeSelection: true
  pool: {name: shared, generation: 1, resourceSliceCount: 1}
  devices:
  - {name: gpu-n2, nodeName: n2, attributes: {}}
  - {name: gpu-n1, nodeName: n1, attributes: {decode: {bool: true}}}
"#;

    fn explain_for(text: &str, minor: u32) -> Diagnosis {
        let objects = objects(text);
        explain(&Input {
            objects: &objects,
            target: &Target::Pod {
                namespace: "media".into(),
                name: "p".into(),
            },
            features: Features::for_minor(minor),
            unread: &[],
            every_device: false,
            threads: 4,
        })
        .unwrap()
    }

    #[test]
    fn a_per_device_slice_is_gathered_whole_and_its_selectors_run_first() {
        // pools_incubating.go GatherPools takes the whole slice for n1 (one device is for
        // it); allocator_incubating.go isSelectable runs the selectors on gpu-n2 before
        // checking gpu-n2's own node: the runtime error fails the attempt on n1 too.
        let text = format!("{PER_DEVICE}{DECODE}");
        let d = explain_for(&text, 36);
        let error = d
            .attempt_error
            .as_ref()
            .expect("the selector fails on gpu-n2");
        assert!(error.message.contains("no such key: decode"), "{error:?}");
        assert_eq!(
            outcome_kinds(&d),
            [(OutcomeKind::Error, vec!["n1".to_owned(), "n2".to_owned()])]
        );
        // Without the error, gpu-n2 is not for n1: n1 gets gpu-n1, n2 nothing.
        let d = explain_for(
            &text.replace(
                "gpu-n2, nodeName: n2, attributes: {}",
                "gpu-n2, nodeName: n2, attributes: {decode: {bool: false}}",
            ),
            36,
        );
        assert!(d.attempt_error.is_none(), "{:?}", d.attempt_error);
        assert_eq!(
            outcome_kinds(&d)[0],
            (OutcomeKind::Allocatable, vec!["n1".to_owned()])
        );
        assert_eq!(d.nodes.as_ref().expect("nodes").allocatable, 1);
    }

    #[test]
    fn before_1_36_a_per_device_slice_is_skipped() {
        // DRAPartitionableDevices is off by default in 1.34 and 1.35: GatherPools skips a
        // slice that sets perDeviceNodeSelection, so nothing of it is allocated or evaluated.
        let text = format!("{PER_DEVICE}{DECODE}");
        for minor in [34, 35] {
            let d = explain_for(&text, minor);
            assert!(d.attempt_error.is_none(), "{:?}", d.attempt_error);
            assert!(
                notes(&d)
                    .iter()
                    .any(|n| n.contains("skips ResourceSlice shared")
                        && n.contains("DRAPartitionableDevices")),
                "{:?}",
                notes(&d)
            );
            assert!(
                d.nodes.as_ref().is_none_or(|n| n.allocatable == 0),
                "{:?}",
                d.nodes
            );
        }
        let d = explain_for(&text, 36);
        assert!(
            !notes(&d)
                .iter()
                .any(|n| n.contains("DRAPartitionableDevices"))
        );
    }

    /// Pool n1 lists gpu0 in both of its slices for n1; pool shared lists gpu0 once for n1
    /// and once for n2, which is no duplicate on either node.
    const DUPLICATE: &str = r#"
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: n1-a}
spec:
  driver: media.liken.sh
  nodeName: n1
  pool: {name: n1, generation: 1, resourceSliceCount: 2}
  devices: [{name: gpu0, attributes: {decode: {bool: true}}}]
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: n1-b}
spec:
  driver: media.liken.sh
  nodeName: n1
  pool: {name: n1, generation: 1, resourceSliceCount: 2}
  devices: [{name: gpu0, attributes: {decode: {bool: true}}}]
"#;

    #[test]
    fn an_invalid_pool_is_not_allocated_from() {
        // pools_incubating.go validateDeviceNames: "duplicate device name gpu0" makes pool n1
        // invalid on n1; from 1.35 allocateOne skips it and Allocate says "invalid resource
        // pools were encountered" (ErrFailedAllocationOnNode: the node is unschedulable).
        let text = format!("{DUPLICATE}{DECODE}");
        for minor in [35, 36] {
            let d = explain_for(&text, minor);
            assert!(d.attempt_error.is_none(), "{:?}", d.attempt_error);
            assert!(d.blocked, "{}", words::verdict(&d));
            let nodes = d.nodes.as_ref().expect("nodes");
            assert_eq!(nodes.outcomes.len(), 1, "{:?}", nodes.outcomes);
            assert_eq!(nodes.outcomes[0].outcome, OutcomeKind::InvalidPools);
            assert_eq!(
                words::node_finding(&nodes.outcomes[0].detail),
                "invalid resource pools were encountered: pool media.liken.sh/n1 (duplicate device name gpu0)"
            );
            let request = &d.claims[0].requests[0];
            assert_eq!(request.reasons[0].reason, ReasonKind::PoolInvalid);
            assert!(
                steps(&d).iter().any(|s| s.contains("invalid pool")),
                "{:?}",
                steps(&d)
            );
        }
        // 1.34 fails the attempt when the search reaches the pool, naming it without its driver.
        let d = explain_for(&text, 34);
        let error = d
            .attempt_error
            .as_ref()
            .expect("the search reaches pool n1");
        assert_eq!(
            error.message,
            "pool n1 is invalid: duplicate device name gpu0"
        );
        // allocationMode All errors on an invalid pool, in every release.
        let all = text.replace(
            "requests: [{name: r, exactly: {deviceClassName: decode}}]",
            "requests: [{name: r, exactly: {deviceClassName: decode, allocationMode: All}}]",
        );
        for minor in [34, 35, 36] {
            let d = explain_for(&all, minor);
            let error = d.attempt_error.as_ref().expect("All over an invalid pool");
            assert_eq!(
                error.message,
                "claim media/b, request r: asks for all devices, but resource pool media.liken.sh/n1 is currently invalid"
            );
        }
    }

    #[test]
    fn an_invalid_pool_is_invalid_only_where_its_slices_name_a_device_twice() {
        // The same name in slices for different nodes is no duplicate: validateDeviceNames
        // reads the slices gathered for the node only.
        let across = DUPLICATE
            .replacen("metadata: {name: n1-b}", "metadata: {name: n2}", 1)
            .replacen("  nodeName: n1\n  pool", "  nodeName: n2\n  pool", 2)
            .replacen("  nodeName: n2\n  pool", "  nodeName: n1\n  pool", 1);
        assert!(across.contains("nodeName: n2"), "{across}");
        let text = format!("{across}{DECODE}");
        let d = explain_for(&text, 36);
        assert!(d.attempt_error.is_none(), "{:?}", d.attempt_error);
        assert_eq!(
            d.nodes.as_ref().expect("nodes").allocatable,
            2,
            "{:?}",
            d.nodes
        );
        // A valid pool on the node serves while the invalid one is skipped (1.35+).
        let text = format!(
            "{DUPLICATE}{DECODE}{}",
            one_gpu("n1", true)
                .replace("name: n1, generation", "name: n1-z, generation")
                .replace("metadata: {name: n1}", "metadata: {name: n1-z}")
        );
        let d = explain_for(&text, 36);
        assert!(d.attempt_error.is_none(), "{:?}", d.attempt_error);
        assert_eq!(
            outcome_kinds(&d),
            [(OutcomeKind::Allocatable, vec!["n1".to_owned()])]
        );
        // 1.34 reaches pool n1 first here (why's order), and says its order is not fixed.
        let d = explain_for(&text, 34);
        assert!(d.attempt_error.is_some());
        assert!(
            notes(&d).iter().any(|n| n.contains("no fixed order")),
            "{:?}",
            notes(&d)
        );
    }

    #[test]
    fn a_pool_being_updated_is_skipped_from_1_35() {
        // One slice of two: allocator_incubating.go allocateOne skips IsIncomplete pools from
        // 1.35; 1.34's checks only IsInvalid and allocates from them.
        let text = format!("{}{DECODE}", one_gpu("n1", true))
            .replace("resourceSliceCount: 1", "resourceSliceCount: 2");
        let d = explain_for(&text, 34);
        assert_eq!(
            outcome_kinds(&d),
            [(OutcomeKind::Allocatable, vec!["n1".to_owned()])]
        );
        for minor in [35, 36] {
            let d = explain_for(&text, minor);
            assert_eq!(
                d.nodes.as_ref().expect("nodes").allocatable,
                0,
                "{:?}",
                d.nodes
            );
            let request = &d.claims[0].requests[0];
            assert_eq!(request.reasons[0].reason, ReasonKind::PoolUpdating);
            assert_eq!(
                words::node_finding(&d.nodes.as_ref().expect("nodes").outcomes[0].detail),
                "request r: every device of the node is in a resource pool being updated or invalid"
            );
            assert!(
                steps(&d).iter().any(|s| s.contains("resourceSliceCount")),
                "{:?}",
                steps(&d)
            );
        }
    }

    #[test]
    fn with_enough_feasible_nodes_an_erring_node_may_be_missed() {
        // 101 nodes: the scheduler stops after 100 feasible ones (numFeasibleNodesToFind),
        // which it can find without checking n0, where the selector fails.
        let mut text: String = (1..=100).map(|i| one_gpu(&format!("n{i}"), true)).collect();
        text += &one_gpu("n0", false);
        text += DECODE;
        let d = explain_pod(&text).unwrap();
        let error = d.attempt_error.as_ref().expect("n0 errs");
        assert!(!error.always, "{error:?}");
        assert!(
            words::verdict(&d).starts_with("scheduling attempts for pod media/p may fail"),
            "{}",
            words::verdict(&d)
        );
        // What this evaluator cannot decide is no scheduler error: no "may" for it.
        let undecided = text.replace(
            "devices: [{name: gpu0, attributes: {}}]",
            "devices: [{name: gpu0, allowMultipleAllocations: true, attributes: {decode: {bool: true}}, capacity: {memory: {value: 1Gi}}}]",
        );
        let d = explain_pod(&undecided).unwrap();
        let error = d.attempt_error.as_ref().expect("n0 is not decided");
        assert!(error.message.contains("is not modelled"), "{error:?}");
        assert!(error.always, "{error:?}");
        // ...and no verdict either way: undecided, with what was not decided.
        assert!(error.undecided, "{error:?}");
        assert!(!d.blocked, "{}", words::verdict(&d));
        assert!(
            words::verdict(&d).starts_with("undecided for pod media/p: "),
            "{}",
            words::verdict(&d)
        );
        assert!(
            unchecked(&d).contains(&error.message),
            "{:?}",
            unchecked(&d)
        );
        // With one feasible node fewer, the scheduler checks them all: every attempt fails.
        let text = text.replacen(
            "devices: [{name: gpu0, attributes: {decode: {bool: true}}}]",
            "devices: []",
            1,
        );
        let d = explain_pod(&text).unwrap();
        assert!(d.attempt_error.as_ref().expect("n0 errs").always);
    }

    #[test]
    fn the_diagnosis_is_the_same_on_any_number_of_threads() {
        // 300 nodes (and slices) of two GPUs each: some GPUs lack `decode` (a runtime error on
        // every seventh node, the first one not first), some are held by other claims; the
        // pod's claim asks for two GPUs in two requests. Slices, nodes and requests go to
        // worker threads.
        let mut text = String::new();
        for i in 0..300 {
            let gpu1 = if i % 7 == 3 {
                "{}"
            } else {
                "{decode: {bool: true}}"
            };
            text += &format!(
                r#"
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {{name: n{i:03}}}
spec:
  driver: media.liken.sh
  nodeName: n{i:03}
  pool: {{name: n{i:03}, generation: 1, resourceSliceCount: 1}}
  devices:
  - {{name: gpu0, attributes: {{decode: {{bool: {decode}}}}}}}
  - {{name: gpu1, attributes: {gpu1}}}
"#,
                decode = i % 4 != 1,
            );
            if i % 5 == 0 {
                text += &format!(
                    r#"
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {{name: other-{i}, namespace: media}}
spec: {{}}
status:
  allocation:
    devices:
      results: [{{request: r, driver: media.liken.sh, pool: n{i:03}, device: gpu0}}]
"#
                );
            }
        }
        text += &DECODE.replace(
            "requests: [{name: r, exactly: {deviceClassName: decode}}]",
            "requests: [{name: r, exactly: {deviceClassName: decode}}, {name: s, exactly: {deviceClassName: decode}}]",
        );
        let target = Target::Pod {
            namespace: "media".into(),
            name: "p".into(),
        };
        let explain_on = |objects: &crate::fleet::objects::Objects, threads| {
            explain(&Input {
                objects,
                target: &target,
                features: Features::for_minor(36),
                unread: &[],
                every_device: true,
                threads,
            })
            .unwrap()
        };
        let json = |d: &Diagnosis| serde_json::to_string_pretty(d).unwrap();
        let erring = objects(&text);
        let alone = explain_on(&erring, 1);
        assert!(alone.attempt_error.is_some());
        let (_, nodes) = outcome_kinds(&alone)
            .into_iter()
            .find(|(kind, _)| *kind == OutcomeKind::Error)
            .expect("nodes that err");
        assert_eq!(nodes[..2], ["n003", "n010"]);
        let alone = json(&alone);
        for threads in [2, 3, 4] {
            assert_eq!(
                json(&explain_on(&erring, threads)),
                alone,
                "on {threads} threads"
            );
        }
        // Guarded, the class errs nowhere: nodes are allocatable, taken or short of GPUs.
        let guarded = text.replace(
            "expression: 'device.attributes[\"media.liken.sh\"].decode'",
            "expression: 'device.attributes[\"media.liken.sh\"].?decode.orValue(false)'",
        );
        assert_ne!(guarded, text);
        let guarded = objects(&guarded);
        let alone = explain_on(&guarded, 1);
        assert!(alone.attempt_error.is_none());
        assert_eq!(json(&explain_on(&guarded, 2)), json(&alone));
    }

    #[test]
    fn feasible_nodes_to_find_follows_the_scheduler() {
        assert_eq!(num_feasible_nodes_to_find(99), 99);
        assert_eq!(num_feasible_nodes_to_find(100), 100);
        assert_eq!(num_feasible_nodes_to_find(500), 230);
        assert_eq!(num_feasible_nodes_to_find(5000), 500);
        assert_eq!(num_feasible_nodes_to_find(100_000), 5000);
    }

    #[test]
    fn first_available_all_and_taints() {
        // firstAvailable: the 10-bit GPU first, any media device second; the second serves on
        // n2, the first only on n1.
        let spec = r#"  devices:
    requests:
    - name: decodes
      firstAvailable:
      - {name: ten-bit, deviceClassName: decode-10bit}
      - {name: any, deviceClassName: gpu-render, count: 2}"#;
        // Exclusive render nodes, so that a count of two needs two of them.
        let exclusive = FLEET.replace(
            "    allowMultipleAllocations: true\n    attributes:\n      renderNode",
            "    attributes:\n      renderNode",
        );
        assert_ne!(exclusive, FLEET);
        let d = explain_pod(&format!(
            "{exclusive}{}{}",
            pod(STATUS),
            claim("p-gpu-x", spec, "")
        ))
        .unwrap();
        let names: Vec<&str> = d.claims[0]
            .requests
            .iter()
            .map(|r| r.name.as_str())
            .collect();
        assert_eq!(names, ["decodes/ten-bit", "decodes/any"]);
        assert_eq!(d.claims[0].requests[1].count, 2);
        // n1 by the first sub-request; n2 has one render node, and the second asks for two:
        // every request has a usable device there, the counts do not add up.
        assert_eq!(
            outcome_kinds(&d),
            [
                (OutcomeKind::Allocatable, vec!["n1".to_owned()]),
                (OutcomeKind::CannotAllocate, vec!["n2".to_owned()]),
            ]
        );

        // allocationMode All while n1's media pool is being updated: the attempt fails.
        let all = SPEC.replace(
            "exactly: {deviceClassName: decode-10bit}",
            "exactly: {deviceClassName: decode-10bit, allocationMode: All}",
        );
        let updating = FLEET.replacen(
            "pool: {name: n1, generation: 1, resourceSliceCount: 1}\n  devices:\n  - name: gpu-a",
            "pool: {name: n1, generation: 1, resourceSliceCount: 2}\n  devices:\n  - name: gpu-a",
            1,
        );
        assert_ne!(updating, FLEET);
        let d = explain_pod(&format!(
            "{updating}{}{}",
            pod(STATUS),
            claim("p-gpu-x", &all, "")
        ))
        .unwrap();
        assert!(d.blocked);
        let error = d.attempt_error.as_ref().expect("the attempt fails");
        assert!(
            error.message.contains("currently being updated"),
            "{}",
            error.message
        );

        // A device taint the request does not tolerate.
        let tainted = FLEET.replace(
            "  - name: gpu-a\n    allowMultipleAllocations: true\n",
            "  - name: gpu-a\n    allowMultipleAllocations: true\n    taints: [{key: maintenance, value: firmware, effect: NoSchedule}]\n",
        );
        assert_ne!(tainted, FLEET);
        let d = explain_pod(&format!(
            "{tainted}{}{}",
            pod(STATUS),
            claim("p-gpu-x", SPEC, "")
        ))
        .unwrap();
        assert!(d.blocked);
        let decodes = &d.claims[0].requests[1];
        assert_eq!((decodes.qualifying, decodes.available), (1, 0));
        let reason = decodes
            .reasons
            .iter()
            .find(|r| r.reason == ReasonKind::Untolerated)
            .unwrap();
        assert_eq!(
            words::detail(&reason.detail),
            "taint maintenance=firmware:NoSchedule is not tolerated"
        );
        assert!(
            steps(&d).iter().any(|s| s.contains(
                "request decodes: devices that qualify carry taint \
                     maintenance=firmware:NoSchedule: tolerate it"
            )),
            "{:?}",
            steps(&d)
        );
    }

    #[test]
    fn targets_that_are_not_there() {
        let text = format!("{FLEET}{}", pod(STATUS));
        let objects = objects(&text);
        let explain_target = |namespace: &str, name: &str| {
            explain(&Input {
                objects: &objects,
                target: &Target::Pod {
                    namespace: namespace.into(),
                    name: name.into(),
                },
                features: Features::default(),
                unread: &[],
                every_device: false,
                threads: 4,
            })
        };
        let e = explain_target("default", "p").unwrap_err();
        assert_eq!(
            e.to_string(),
            "pod default/p not found (hint: a pod of that name is in the namespace media: add -n media)"
        );
        let e = explain_target("media", "pp").unwrap_err();
        assert!(e.to_string().contains("similar names: p"), "{e}");
        let no_claims = text.replace(
            "  resourceClaims: [{name: gpu, resourceClaimTemplateName: t}]\n",
            "",
        );
        let objects = crate::explain::model::tests::objects(&no_claims);
        let e = explain(&Input {
            objects: &objects,
            target: &Target::Pod {
                namespace: "media".into(),
                name: "p".into(),
            },
            features: Features::default(),
            unread: &[],
            every_device: false,
            threads: 4,
        })
        .unwrap_err();
        assert!(matches!(e, TargetError::NoClaims { .. }), "{e}");
    }
}

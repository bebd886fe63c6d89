//! Every sentence `why` says: the findings of `explain` in words. The text and the `sentence`
//! beside each code in `-o json|yaml` both come from here, so they never disagree.

use crate::explain::findings::{
    AttemptCode, AttemptError, ClaimProblem, Constraint, Detail, DeviceReason, Diagnosis,
    ErrorSummary, NodeFinding, Note, SelectorRef, Step, TargetKind, Unchecked, Unsatisfied,
    Verdict,
};
use crate::fleet::objects::Kind;

/// How many names a grouped line lists before it says "and N more".
const NAMES_SHOWN: usize = 5;

/// `1 device`, `2 devices`.
pub(crate) fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// A list of names, the first few and how many more.
pub(crate) fn shorten(names: &[String]) -> String {
    if names.len() <= NAMES_SHOWN {
        return names.join(", ");
    }
    format!(
        "{} and {} more",
        names[..NAMES_SHOWN].join(", "),
        names.len() - NAMES_SHOWN
    )
}

/// `pod ns/name` or `claim ns/name`.
pub(crate) fn what(d: &Diagnosis) -> String {
    match d.kind {
        TargetKind::Pod => format!("pod {}", d.name),
        TargetKind::ResourceClaim => format!("claim {}", d.name),
    }
}

/// The verdict, one sentence.
pub(crate) fn verdict(d: &Diagnosis) -> String {
    let what = what(d);
    let pod = d.kind == TargetKind::Pod;
    let on = |node: &Option<String>| {
        node.as_ref()
            .map(|n| format!(" on node {n}"))
            .unwrap_or_default()
    };
    match &d.verdict {
        Verdict::ClaimProblem { problem: p } => format!("{what} waits: {}.", problem(p)),
        Verdict::Undecided { message } => format!("undecided for {what}: {message}."),
        Verdict::AttemptsFail {
            always: true,
            message,
        } => format!("every scheduling attempt for {what} fails: {message}."),
        Verdict::AttemptsFail { message, .. } => {
            format!("scheduling attempts for {what} may fail: {message}.")
        }
        Verdict::ClaimAllocated { node } => {
            format!("{what} is allocated{}; DRA does not hold it.", on(node))
        }
        Verdict::PodRunning { node } => format!(
            "the claims of {what} are allocated{}; DRA does not hold it.",
            on(node)
        ),
        Verdict::CannotPrepare { node, message } => format!(
            "the claims of {what} are allocated{}, but the kubelet there cannot prepare them: {message}.",
            on(node)
        ),
        Verdict::WaitsForOther { node } => format!(
            "the claims of {what} are allocated{}; the pod waits for something other than its devices.",
            on(node)
        ),
        Verdict::UncheckedMayBlock {
            allocatable,
            total,
            nodes,
        } => format!(
            "undecided for {what}: the devices allow {} on {allocatable} of {total} nodes{}, but what was not checked may still block it: {}.",
            if pod { "its claims" } else { "it" },
            if nodes.is_empty() {
                String::new()
            } else {
                format!(" ({})", nodes.join(", "))
            },
            d.unchecked
                .iter()
                .map(unchecked)
                .collect::<Vec<_>>()
                .join("; ")
        ),
        Verdict::Allocatable { allocatable, total } => format!(
            "nothing in the fleet blocks {what}: {} be allocated now on {allocatable} of {total} nodes.",
            if pod { "its claims can" } else { "it can" }
        ),
        Verdict::NoNode {
            outcome,
            count,
            total,
        } => {
            let main = match outcome {
                Some(o) => format!("{} ({count} of {total} nodes)", node_finding(o)),
                None => "no node has devices".to_owned(),
            };
            if pod {
                format!("no node can allocate the claims of {what}: {main}.")
            } else {
                format!("no node can allocate {what}: {main}.")
            }
        }
    }
}

/// What is wrong with a claim.
pub(crate) fn problem(p: &ClaimProblem) -> String {
    match p {
        ClaimProblem::ClaimMissing {
            namespace, claim, ..
        } => format!(
            "the pod names ResourceClaim {namespace}/{claim}, which does not exist; the scheduler waits for it without an event"
        ),
        ClaimProblem::NotCreated { entry } => format!(
            "the claim for {entry} is not created yet (pod.status.resourceClaimStatuses has no entry); the scheduler waits without an event"
        ),
        ClaimProblem::NotCreatedTemplateUnread {
            entry,
            namespace,
            template,
        } => format!(
            "the claim for {entry} is not created yet (pod.status.resourceClaimStatuses has no entry), and its template {namespace}/{template} was not read, so what it asks for is not evaluated"
        ),
        ClaimProblem::TemplateMissing {
            namespace,
            template,
            entry,
        } => format!(
            "ResourceClaimTemplate {namespace}/{template} does not exist, so no claim can be made for {entry}"
        ),
        ClaimProblem::NotOwned {
            namespace,
            claim,
            pod,
        } => format!(
            "ResourceClaim {namespace}/{claim} was not created for pod {namespace}/{pod} (the pod is not its owner); the scheduler waits without an event"
        ),
        ClaimProblem::StatusClaimMissing { namespace, claim } => format!(
            "the pod's status names ResourceClaim {namespace}/{claim}, which does not exist (deleted?); the scheduler waits without an event"
        ),
        ClaimProblem::NoSource { entry } => {
            format!("spec.resourceClaims[{entry}] names neither a claim nor a template")
        }
        ClaimProblem::BeingDeleted { claim } => format!("resourceclaim {claim} is being deleted"),
        ClaimProblem::Unused { namespace, .. } => format!(
            "no pod uses it (none in {namespace} names it in spec.resourceClaims, none owns it, and status.reservedFor is empty), and the scheduler allocates a claim only while it schedules a pod that uses it"
        ),
        ClaimProblem::ClassMissing {
            claim,
            request,
            class,
            ..
        } => format!("claim {claim}: request {request}: device class {class} does not exist"),
    }
}

/// What fixes a claim's problem.
pub(crate) fn fix(p: &ClaimProblem) -> String {
    match p {
        ClaimProblem::ClaimMissing {
            namespace,
            claim,
            entry,
        } => format!(
            "create the claim {claim} in {namespace}, or fix spec.resourceClaims[{entry}].resourceClaimName"
        ),
        ClaimProblem::NotCreated { .. } => "wait for the resource claim controller; if it stays so, look for FailedResourceClaimCreation events and the controller manager's log".to_owned(),
        ClaimProblem::NotCreatedTemplateUnread { .. } => "wait for the resource claim controller; if it stays so, look for FailedResourceClaimCreation events; read the templates too (see the note) to evaluate the claim".to_owned(),
        ClaimProblem::TemplateMissing {
            namespace,
            template,
            entry,
        } => format!(
            "create the template {template} in {namespace} (kubectl media class --claim ...), or fix spec.resourceClaims[{entry}].resourceClaimTemplateName"
        ),
        ClaimProblem::NotOwned { .. } => {
            "delete the claim so that the controller makes the pod's own, or recreate the pod"
                .to_owned()
        }
        ClaimProblem::StatusClaimMissing { .. } => {
            "recreate the pod, so that its claim is made again".to_owned()
        }
        ClaimProblem::NoSource { .. } => {
            "set resourceClaimName or resourceClaimTemplateName".to_owned()
        }
        ClaimProblem::BeingDeleted { .. } => {
            "wait for the deletion to finish (finalizers), then recreate the pod or the claim"
                .to_owned()
        }
        ClaimProblem::Unused { name, .. } => format!(
            "name it in a pod's spec.resourceClaims (resourceClaimName: {name}); if the pod it was made for is gone, delete the claim"
        ),
        ClaimProblem::ClassMissing {
            nearest: Some(n), ..
        } => format!(
            "did you mean {n}? fix deviceClassName, or create the class (kubectl media class ... | kubectl apply -f -)"
        ),
        ClaimProblem::ClassMissing { nearest: None, .. } => "create the DeviceClass (kubectl media class ... | kubectl apply -f -), or fix deviceClassName".to_owned(),
    }
}

/// `matchAttribute resource.kubernetes.io/pciBusID over gpu, decodes`.
pub(crate) fn constraint(c: &Constraint) -> String {
    let over = |requests: &[String]| {
        if requests.is_empty() {
            "all requests".to_owned()
        } else {
            requests.join(", ")
        }
    };
    match c {
        Constraint::MatchAttribute {
            attribute,
            requests,
        } => format!("matchAttribute {attribute} over {}", over(requests)),
        Constraint::DistinctAttribute {
            attribute,
            requests,
        } => format!("distinctAttribute {attribute} over {}", over(requests)),
        Constraint::Empty { requests } => format!("a constraint over {}", over(requests)),
    }
}

/// `class decode-10bit selector #0`, `request selector #0`.
pub(crate) fn selector(s: &SelectorRef) -> String {
    match s {
        SelectorRef::Class { class, index } => format!("class {class} selector #{index}"),
        SelectorRef::Request { index } => format!("request selector #{index}"),
        SelectorRef::Scope { scope, index } => format!("{scope} selector #{index}"),
    }
}

/// What devices that do not serve have: `scale10bit is false`, the error, the taint.
pub(crate) fn detail(d: &Detail) -> String {
    match d {
        Detail::Reads { reads } if reads.is_empty() => "is false".to_owned(),
        Detail::Reads { reads } => reads
            .iter()
            .map(|r| match &r.value {
                Some(value) => format!("{} is {value}", r.name),
                None => format!("{} is not set", r.name),
            })
            .collect::<Vec<_>>()
            .join(", "),
        Detail::RuntimeError { message } => format!("CEL runtime error: {message}"),
        Detail::CannotEvaluate { message } => format!("cannot evaluate: {message}"),
        Detail::Failed { message } => message.clone(),
        Detail::Taken { shareable: true } => {
            "shareable, but held exclusively (the holders' allocations have no shareID)".to_owned()
        }
        Detail::Taken { shareable: false } => {
            "allocated to other claims, and not shareable".to_owned()
        }
        Detail::CapacityUnmodelled => "passes the selectors and is held by no exclusive allocation, but allows multiple allocations and has capacities: whether what one more allocation consumes fits (DRAConsumableCapacity, by requestPolicy) is not modelled by this evaluator, so the search assumes it does".to_owned(),
        Detail::CapacityShort {
            capacity,
            asked,
            has: Some(has),
        } => format!("capacity {capacity} is {has}, less than the {asked} asked"),
        Detail::CapacityShort {
            capacity,
            asked,
            has: None,
        } => format!("no capacity {capacity} (the request asks for {asked})"),
        Detail::PoolInvalid { pool, reason } => format!(
            "resource pool {pool} is invalid on the node ({reason}): the scheduler allocates nothing from it"
        ),
        Detail::PoolUpdating { pool } => format!(
            "resource pool {pool} is being updated (not all its slices are published): the scheduler allocates nothing from it until it is complete"
        ),
        Detail::Untolerated { key, value, effect } => format!(
            "taint {key}{}:{effect} is not tolerated",
            value.as_deref().map(|v| format!("={v}")).unwrap_or_default()
        ),
    }
}

/// One device's verdict for `-o wide`: `Available`, or the reason.
pub(crate) fn device_status(status: Option<&DeviceReason>) -> String {
    let Some(status) = status else {
        return "Available".to_owned();
    };
    let text = detail(&status.detail);
    match &status.at {
        Some(at) => match &at.clause {
            Some(clause) => format!("{}: {clause}: {text}", selector(&at.selector)),
            None => format!("{}: {text}", selector(&at.selector)),
        },
        None => text,
    }
}

/// How a group of nodes fares.
pub(crate) fn node_finding(f: &NodeFinding) -> String {
    match f {
        NodeFinding::Allocatable { checked: true } => "every claim can be allocated now".to_owned(),
        NodeFinding::Allocatable { checked: false } => {
            "the devices allow every claim (the node's own filters unchecked)".to_owned()
        }
        NodeFinding::NodeSelector { wants } => format!(
            "the pod's nodeSelector wants {}",
            wants
                .iter()
                .map(|l| format!("{}={}", l.key, l.value))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        NodeFinding::NodeAffinity => "the pod's required node affinity does not match".to_owned(),
        NodeFinding::Cordoned => "the node is cordoned (spec.unschedulable)".to_owned(),
        NodeFinding::NodeTaint { key, value } => format!(
            "untolerated taint {{{key}: {}}}",
            value.as_deref().unwrap_or_default()
        ),
        NodeFinding::ClaimElsewhere => {
            "another claim of the pod is allocated on a different node".to_owned()
        }
        NodeFinding::RequestUnsatisfied { request, why } => match why {
            Unsatisfied::NoDevices => format!("request {request}: the node has no devices"),
            Unsatisfied::PoolsUnusable => format!(
                "request {request}: every device of the node is in a resource pool being updated or invalid"
            ),
            Unsatisfied::NonePass => format!("request {request}: no device passes the selectors"),
            Unsatisfied::TakenOrTainted => format!(
                "request {request}: every device that passes the selectors is taken or tainted"
            ),
        },
        NodeFinding::Constraint { distinct, requests } => {
            let parts: Vec<String> = requests
                .iter()
                .map(|r| {
                    let addresses: Vec<&str> = r
                        .gpus
                        .iter()
                        .map(|g| g.as_deref().unwrap_or("(no pciBusID)"))
                        .collect();
                    // `request decodes on GPU ...`: a request's name alone reads as a verb.
                    let gpus = if addresses.len() == 1 { "GPU" } else { "GPUs" };
                    format!("request {} on {gpus} {}", r.request, addresses.join(", "))
                })
                .collect();
            format!(
                "each request can be served, never {} ({})",
                if *distinct {
                    "together under the claim's constraints"
                } else {
                    "on one GPU"
                },
                parts.join("; ")
            )
        }
        NodeFinding::CannotAllocate => {
            "the devices do not add up: counts, or exclusive devices wanted by several requests"
                .to_owned()
        }
        NodeFinding::InvalidPools { pools } => format!(
            "invalid resource pools were encountered: {}",
            pools
                .iter()
                .map(|p| format!("pool {} ({})", p.pool, p.reason))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        NodeFinding::Error { error } => error_summary(error),
    }
}

fn error_summary(e: &ErrorSummary) -> String {
    match e {
        ErrorSummary::RuntimeError {
            selector: s,
            message,
        } => {
            format!("{}: CEL runtime error: {message}", selector(s))
        }
        ErrorSummary::CannotEvaluate {
            selector: s,
            message,
        } => {
            format!("{}: cannot evaluate: {message}", selector(s))
        }
        ErrorSummary::CapacityUnmodelled { claim, request } => format!(
            "claim {claim}, request {request}: only shareable devices with capacities would serve it, and whether they have room (DRAConsumableCapacity) is not modelled"
        ),
        ErrorSummary::Other { message } => message.clone(),
    }
}

const SCHEDULER_ERROR: &str =
    "the scheduler fails the whole scheduling attempt (PodScheduled reason SchedulerError)";

/// What the attempt error does.
pub(crate) fn consequence(a: &AttemptError) -> String {
    if let Some(odds) = &a.odds {
        return format!(
            "the scheduler fails the scheduling attempt (PodScheduled reason SchedulerError) when it checks one of the {} where this error occurs; with {} nodes that can take the pod it may stop after finding {} of them first (numFeasibleNodesToFind, with the default percentageOfNodesToScore), so an attempt may succeed",
            count(odds.erring, "node", "nodes"),
            odds.allocatable,
            odds.to_find
        );
    }
    match &a.error {
        AttemptCode::RuntimeError { .. } => {
            format!("{SCHEDULER_ERROR}, on every node, not just this device")
        }
        AttemptCode::SearchTooLong => {
            "kubectl media cannot decide this claim on such nodes; nothing about it is guessed"
                .to_owned()
        }
        AttemptCode::CannotEvaluate
        | AttemptCode::Unsupported
        | AttemptCode::CapacityUnmodelled => {
            "kubectl media cannot decide this claim; nothing about it is guessed".to_owned()
        }
        AttemptCode::PoolIncomplete => "the scheduler does not allocate allocationMode All while a pool's slices are being updated".to_owned(),
        AttemptCode::PoolInvalidAll { pool, reason } => format!(
            "the scheduler fails the scheduling attempt (PodScheduled reason SchedulerError): allocationMode All is not allocated while a pool of the node is invalid ({pool}: {reason})"
        ),
        AttemptCode::PoolInvalid { pool, reason } => format!(
            "the scheduler fails the scheduling attempt (PodScheduled reason SchedulerError) when its search reaches the invalid pool {pool} ({reason}); Kubernetes 1.35 skips such pools instead"
        ),
        AttemptCode::ConstraintAll => "the scheduler fails the attempt: allocationMode All takes every matching device, and one breaks the constraint".to_owned(),
        AttemptCode::TooManyDevices => {
            format!("{SCHEDULER_ERROR}: a claim holds at most 32 devices")
        }
        AttemptCode::EmptyConstraint { .. } => {
            format!("{SCHEDULER_ERROR}: its allocator does not know the constraint")
        }
        AttemptCode::CapacityDisabled => SCHEDULER_ERROR.to_owned(),
        AttemptCode::ClassNotFound => "the scheduler fails the pod".to_owned(),
    }
}

/// What fixes the attempt error.
pub(crate) fn attempt_fix(code: &AttemptCode) -> String {
    match code {
        AttemptCode::RuntimeError {
            selector: s,
            missing_key: Some(key),
        } => format!(
            "if the name is right and only some devices have it, guard the read in {}: has(device.attributes[...].{key}) && ..., or device.attributes[...].?{key}.orValue(false)",
            selector(s)
        ),
        AttemptCode::RuntimeError {
            selector: s,
            missing_key: None,
        } => format!("fix {} for the devices it fails on", selector(s)),
        AttemptCode::SearchTooLong => "check the scheduler's events for its verdict; fewer claims competing for the same exclusive devices shorten the search".to_owned(),
        AttemptCode::CannotEvaluate
        | AttemptCode::Unsupported
        | AttemptCode::CapacityUnmodelled => "check the scheduler's events for its verdict".to_owned(),
        AttemptCode::PoolIncomplete => "wait for the driver to finish publishing the pool".to_owned(),
        AttemptCode::PoolInvalidAll { pool, reason } | AttemptCode::PoolInvalid { pool, reason } => {
            pool_fix(pool, reason)
        }
        AttemptCode::ConstraintAll => "narrow the request's selectors to devices that share the attribute, or drop the constraint".to_owned(),
        AttemptCode::TooManyDevices => "ask for at most 32 devices per claim: lower the counts, or split the requests over several claims".to_owned(),
        AttemptCode::EmptyConstraint { distinct: true } => "Kubernetes 1.35's scheduler knows distinctAttribute only with the DRAConsumableCapacity feature gate on (1.36 on by default): turn it on, or drop the constraint".to_owned(),
        AttemptCode::EmptyConstraint { distinct: false } => {
            "give the constraint matchAttribute (or distinctAttribute)".to_owned()
        }
        AttemptCode::CapacityDisabled => "turn the DRAConsumableCapacity feature gate on (on by default from Kubernetes 1.36), or drop the request's capacity".to_owned(),
        AttemptCode::ClassNotFound => "create the class or fix deviceClassName".to_owned(),
    }
}

/// What fixes an invalid pool: only its driver (or whoever publishes the slices) can.
fn pool_fix(pool: &str, reason: &str) -> String {
    match reason.strip_prefix("duplicate device name ") {
        Some(device) => format!(
            "the slices of pool {pool} for the node must name device {device} once: the driver publishes it twice (two slices of one generation, or two publishers of one pool name); fix the driver or delete the stray slice"
        ),
        None => format!("fix the slices of pool {pool}: {reason}"),
    }
}

/// What was not checked.
pub(crate) fn unchecked(u: &Unchecked) -> String {
    match u {
        Unchecked::NodeFilters => "the nodes' own filters (the pod's nodeSelector, affinity and tolerations of node taints), as no Node objects were read".to_owned(),
        Unchecked::UserUnread { pod } => format!(
            "the node filters of pod {pod}, which uses the claim (its nodeSelector, affinity and tolerations), as it was not read"
        ),
        Unchecked::NoPods => {
            "the pod that uses the claim and its node filters, as no pods were read".to_owned()
        }
        Unchecked::OtherClaims => {
            "devices held by other claims, as no resourceclaims were read".to_owned()
        }
        Unchecked::ClaimsOutside { namespace } => format!(
            "devices held by claims outside the namespace {namespace}, as those claims were not read"
        ),
        Unchecked::Undecided { message } => message.clone(),
    }
}

/// What the analysis cannot say without a kind.
fn lacks(kind: Kind) -> &'static str {
    match kind {
        Kind::ResourceSlice => "no device can be evaluated",
        Kind::DeviceClass => "no selector can be evaluated",
        // Never said: claims have notes of their own.
        Kind::ResourceClaim => "devices held by other namespaces' claims are not known to be taken",
        Kind::ResourceClaimTemplate => "claims not created yet cannot be evaluated",
        Kind::Pod => "the pod cannot be found",
        Kind::Node => "the pod's nodeSelector, affinity and node taints are not checked",
        Kind::Event => "the scheduler's and the kubelet's messages are not shown",
        Kind::DeviceTaintRule => "the taints DeviceTaintRules add to devices are not applied",
    }
}

/// A note: what the analysis lacks or assumed.
pub(crate) fn note(n: &Note) -> String {
    match n {
        Note::Unread { kind, why } => {
            format!("{} were not read ({why}): {}", kind.plural(), lacks(*kind))
        }
        Note::ClaimsUnread { why } => format!(
            "resourceclaims were not read ({why}): devices other claims hold are not known to be taken"
        ),
        Note::ClaimsOutsideUnread { namespace, why } => format!(
            "resourceclaims outside the namespace {namespace} were not read ({why}): devices they hold are not known to be taken; the namespace's own claims were read"
        ),
        Note::NoNodes => "no Node objects were read: the nodes are the ones the slices name, and the pod's nodeSelector, affinity and node taints were not checked".to_owned(),
        Note::NotChecked { unchecked: u } => format!("not checked: {}", unchecked(u)),
        Note::SlicesSkipped { release, slices } => {
            let one = slices.len() == 1;
            format!(
                "Kubernetes 1.{release} skips {} {}: {} perDeviceNodeSelection, which its scheduler reads only with the DRAPartitionableDevices feature gate (off by default before 1.36), so none of {} devices is allocated",
                if one { "ResourceSlice" } else { "ResourceSlices" },
                slices.join(", "),
                if one { "it sets" } else { "they set" },
                if one { "its" } else { "their" },
            )
        }
        Note::AllModeOrder { release } => format!(
            "Kubernetes 1.{release} tries a node's resource pools in no fixed order (pools_incubating.go GatherPools builds them from a map; 1.36 sorts them): with allocationMode All, the order can decide whether an attempt meets a device that breaks a constraint (an error) or one in use first, and which device an All sub-request after the first takes; why tries pools by driver and pool name"
        ),
        Note::RuntimeErrorOrder { release } => format!(
            "Kubernetes 1.{release} tries a node's resource pools in no fixed order (pools_incubating.go GatherPools builds them from a map; 1.36 sorts them): on a node where a selector fails on one device and other devices could serve, an attempt may meet either first; why tries pools by driver and pool name"
        ),
        Note::InvalidPoolOrder { release } => format!(
            "Kubernetes 1.{release} tries a node's resource pools in no fixed order and fails the attempt when it reaches an invalid one: on a node where a valid pool could serve, an attempt may reach that first and succeed; why tries pools by driver and pool name"
        ),
        Note::SlicesUnread { why } => format!(
            "resourceslices were not read ({why}): the allocated devices' GPU addresses and render nodes are not shown"
        ),
        Note::ConsumableCapacityAssumed => "DRAConsumableCapacity taken as on: the API server stored allowMultipleAllocations, which it drops with the gate off".to_owned(),
        Note::DeviceTaintsAssumed => "DRADeviceTaints taken as on: the API server stored device taints, which it drops with the gate off".to_owned(),
        Note::DefaultGates => "feature gates as in Kubernetes 1.36 (DRAConsumableCapacity, DRADeviceTaints and DRAPartitionableDevices on); pass --kubernetes-version for another release".to_owned(),
        Note::SearchStopped {
            searched,
            total,
            given_up,
        } => format!(
            "the search for devices hit its step limit on {given_up} nodes, so it stopped after {searched} of the {total} nodes: the other {} are not decided (hint: read fewer nodes with -f, or fewer claims competing for the same devices)",
            total - searched
        ),
    }
}

/// A next step, before `carry` gives its commands this run's flags.
pub(crate) fn step(s: &Step) -> String {
    match s {
        Step::ClaimControllerSays { message } => {
            format!("the resource claim controller says: {message}")
        }
        Step::FixClaim { problem } => fix(problem),
        Step::UnknownAttribute {
            attribute,
            selector: s,
            nearest: Some(n),
        } => format!(
            "no device in the fleet has {attribute} ({}): did you mean {n}?",
            selector(s)
        ),
        Step::UnknownAttribute {
            attribute,
            selector: s,
            nearest: None,
        } => format!(
            "no device in the fleet has {attribute} ({}): check the name against kubectl media caps -o json",
            selector(s)
        ),
        Step::FixAttempt { error } => attempt_fix(error),
        Step::CheckPlugins => "check that the DRA drivers' kubelet plugins run on that node: kubectl -n liken-system get pods -o wide --field-selector spec.nodeName=<node> (media.liken.sh is the media-capabilities agent)".to_owned(),
        Step::Describe { namespace, name } => format!("kubectl describe pod -n {namespace} {name}"),
        Step::SchedulerSaid { message } => format!("the scheduler's last word was {message:?}"),
        Step::SchedulerNodeSide { reasons } => format!(
            "the scheduler says {}: that is the side this explanation could not check; the nodes the devices allow may be among those",
            reasons
                .iter()
                .map(|r| format!("\"{r}\""))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Step::ReadUnchecked => {
            "read what was not checked (see the notes) and run why again".to_owned()
        }
        Step::SchedulerDisagrees { message } => format!(
            "this is not what the scheduler last said ({message:?}): if that is older than the devices' release, it retries on its own; if it stays, the scheduler sees something these objects do not show"
        ),
        Step::Relax {
            request,
            selector: s,
            clause,
            qualifying,
            available,
            nodes,
        } => format!(
            "without {clause} (in {} of request {request}), {} would qualify on {}, {available} of them free",
            selector(s),
            count(*qualifying, "device", "devices"),
            count(*nodes, "node", "nodes"),
        ),
        Step::WaitForHolders { request, holders } => format!(
            "the devices that qualify for request {request} are held by {}: wait for them, or make the devices shareable (allowMultipleAllocations needs DRAConsumableCapacity, on by default from Kubernetes 1.36)",
            shorten(holders)
        ),
        Step::ReallocateHolders {
            request,
            holders,
            agents,
        } => {
            let restart = agents
                .iter()
                .map(|ns| {
                    format!("; for the media-capabilities agents, kubectl -n {ns} rollout restart daemonset/media-capabilities")
                })
                .collect::<String>();
            format!(
                "the devices that qualify for request {request} allow multiple allocations, but {} hold them exclusively: their allocations have no shareID (made while DRAConsumableCapacity was off), which the scheduler counts as exclusive. Have the holders allocated again, shared: recreate the pods that use them{restart}",
                shorten(holders)
            )
        }
        Step::Tolerate { request, taints } => {
            let shown: Vec<&str> = taints.iter().take(3).map(String::as_str).collect();
            let more = match taints.len().saturating_sub(shown.len()) {
                0 => String::new(),
                n => format!(" and {n} more"),
            };
            let ours = taints
                .iter()
                .any(|t| t.starts_with(&format!("{}/", crate::catalogue::DRIVER)));
            format!(
                "request {request}: devices that qualify carry taint {}{more}: tolerate it in \
                 the request's exactly.tolerations if the workload accepts such a GPU (kubectl media \
                 class --claim --tolerate {} writes such a template), or clear the taint{}",
                shown.join(", "),
                shown[0],
                if ours {
                    " (the agent lifts its own once a probe of the GPU succeeds again)"
                } else {
                    ""
                }
            )
        }
        Step::RelaxNodeFilters => "some nodes are ruled out by the pod's own nodeSelector, affinity or tolerations: relax them to reach those nodes' GPUs".to_owned(),
        Step::ConstraintOneGpu => "the constraint keeps the requests on one GPU (matchAttribute): the GPUs that pass one request are not the ones that pass the other".to_owned(),
        Step::FixInvalidPools => "the scheduler allocates nothing from an invalid pool (see the nodes): each pool's slices for a node must name every device once; fix the driver that publishes them twice, or delete the stray slice".to_owned(),
        Step::WaitForPool => "wait for the driver to publish every slice of the pool being updated (its resourceSliceCount): the scheduler allocates from it once it is complete; if it stays incomplete, the driver's publishing is stuck".to_owned(),
        Step::Fallback => "or give the workload a way forward without such a GPU: a second claim on any render node (class gpu-render) that it uses with its own fallback path, or no claim and work on the CPU; the workload's controller chooses, not the scheduler".to_owned(),
        Step::UsedBy {
            namespace,
            name,
            filters_applied,
        } => format!(
            "the claim is used by pod {namespace}/{name}{}; for all of the pod's claims: kubectl media why {name} -n {namespace}",
            if *filters_applied {
                " (its node filters are applied here)"
            } else {
                ""
            }
        ),
        Step::ReadUser { namespace, name } => format!(
            "the claim is used by pod {namespace}/{name}, which was not read: read the pod too (from files: kubectl get pods -n {namespace} -o yaml, added with -f) to apply its node filters"
        ),
        Step::SubDevice {
            claim,
            request,
            driver,
            device,
            kind,
            allocated,
            node,
        } => {
            let lands = if *allocated {
                format!("request {request} of claim {claim} holds")
            } else {
                format!(
                    "request {request} of claim {claim} would land on{}",
                    node.as_deref()
                        .map(|n| format!(" (on node {n})"))
                        .unwrap_or_default()
                )
            };
            format!(
                "{lands} {driver} device {device}, {}: its pciBusID matches the GPU's, but the pod gets that part of the GPU, not the whole GPU; to claim whole GPUs, use the render class of the driver's whole GPUs: kubectl media class NAME --claim --with-render-class --render-driver {driver}",
                kind.described()
            )
        }
    }
}

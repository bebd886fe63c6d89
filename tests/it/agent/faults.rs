//! The agent's faults on the real API server: kube-apiserver stopped and started again on the
//! same etcd; answers the real server gives only by chance, from the fault proxy; refusals by
//! the real admission (ValidatingAdmissionPolicy) and throttling by API Priority and Fairness;
//! other writers' slices in the way.

use super::*;

// --- the API server goes and comes back -------------------------------------------------------

/// The agent's warnings and errors but for its probes and the ones a 1.34 server with default
/// gates causes (it drops `allowMultipleAllocations`, and the failed GPU's taints).
fn problems(agent: &AgentProcess) -> Vec<String> {
    agent
        .log
        .lines()
        .into_iter()
        .filter(|l| (l.contains(" WARN ") || l.contains(" ERROR ")) && !l.contains("probe: "))
        .filter(|l| !l.contains("allowMultipleAllocations") && !l.contains("dropped the taints"))
        .collect()
}

/// How many times the agent said the API server is not working (the line saying it works again
/// quotes that one, at INFO).
fn outages(agent: &AgentProcess) -> usize {
    agent
        .log
        .lines()
        .iter()
        .filter(|l| l.contains(" WARN ") && l.contains("is not working: "))
        .count()
}

/// The wall clock in seconds since the Unix epoch, as the audit log stamps events.
fn now_epoch() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// The agent's longest wait between retries under [`FAST`] (`--max-backoff`).
const MAX_BACKOFF: f64 = 0.4;
/// A request's own time on a loaded machine, on top of the backoff.
const REQUEST_SLACK: f64 = 5.0;

cp_test! {
fn the_api_server_stopped_and_started_again_is_waited_out() {
    // Its own control plane: stopping the shared one would fail every other test.
    let cp = ControlPlane::start();
    prepare(&cp);
    let s = Setup::on(&cp, "restart", 1);

    // Down when the agent starts.
    cp.stop_apiserver();
    let mut agent = s.start(&[]);
    let down = agent.log.wait_for("is not working", DEADLINE);
    assert!(down.contains(" WARN "), "{down}");
    assert!(
        down.contains(&format!(
            "the API server at {} is not working: cannot reach",
            cp.url
        )),
        "names the server and the cause: {down}"
    );
    assert!(agent.running(), "an outage never ends the agent");
    assert_eq!(agent.get("/healthz").0, 200, "alive while the API is down");
    assert_eq!(agent.get("/readyz").0, 503);
    cp.start_apiserver();
    let back_at = now_epoch();
    s.wait_slice("published once the server is back", |_| true);
    let created = s.slice_writes(0)[0].at;
    assert!(
        created - back_at < MAX_BACKOFF + REQUEST_SLACK,
        "published {:.1} s after the server was ready",
        created - back_at
    );
    agent.log.wait_for("created with 1 device(s)", DEADLINE);
    let back = agent.log.wait_for("works again", DEADLINE);
    assert!(
        back.contains(&format!("the API server at {} works again", cp.url)),
        "{back}"
    );
    assert_eq!(
        outages(&agent),
        1,
        "the outage once, not per retry or per loop: {:#?}",
        problems(&agent)
    );
    // A server that is starting serves before its authorizer has its roles: a refusal then
    // (403, "clusterrole ... not found") is said once and retried like any other.
    assert!(
        problems(&agent).iter().all(|l| l.contains("is not working: ") || l.contains("retrying")),
        "{:#?}",
        problems(&agent)
    );
    let lines = agent.log.lines();
    assert!(
        lines
            .iter()
            .all(|l| !l.contains("kube_client") && !l.contains("kube_runtime")),
        "no lines from the client library: {lines:#?}"
    );

    // Stopped and started again while the agent runs, on the same etcd: the slice is still
    // there, and the agent says so once at the start and once at the end.
    let stored = s.slice().unwrap();
    let mark = s.audit.mark();
    s.wait_resyncs(mark, 1);
    cp.stop_apiserver();
    // The stop drains for seconds: the agent has met the closed port many times by now.
    wait("the agent says the server is not working", || outages(&agent) == 2);
    let recovered = format!("the API server at {} works again", cp.url);
    assert_eq!(agent.log.count(&recovered), 1, "no recovery while the server is down");
    cp.start_apiserver();
    let back_at = now_epoch();
    agent.log.wait_for_nth(&recovered, 2, DEADLINE);
    // Back within its backoff: its first request after the restart.
    s.audit
        .wait_until(DEADLINE, |events| events[mark..].iter().any(|e| e.at > back_at))
        .unwrap();
    let first = s.audit.since(mark).into_iter().find(|e| e.at > back_at).unwrap();
    assert!(
        first.at - back_at < MAX_BACKOFF + REQUEST_SLACK,
        "first request {:.1} s after the server was ready: {first:?}",
        first.at - back_at
    );
    // Nothing to write: the slice is as the agent left it...
    let mark_back = s.audit.mark();
    s.wait_resyncs(mark_back, 3);
    assert_eq!(s.slice_writes(mark).len(), 0, "{:#?}", s.slice_writes(mark));
    assert_eq!(s.slice().unwrap()["metadata"]["uid"], stored["metadata"]["uid"]);
    // ...and its watch follows the restarted server: a deletion is seen and undone.
    s.delete_slice();
    s.wait_slice("re-created after the restart", |v| generation(v) == 2);
    assert!(agent.running());
    assert_eq!(agent.get("/healthz").0, 200);
    // The restart said once, and its end once: a connection kube-apiserver closes while it starts
    // up is met by sending the read again, not by a second outage.
    assert_eq!(outages(&agent), 2, "{:#?}", problems(&agent));
    assert_eq!(agent.log.count(&recovered), 2, "{:#?}", agent.log.lines());
}
}

cp_test! {
fn a_read_whose_connection_closes_is_sent_again_and_only_two_in_a_row_are_an_outage() {
    // kube-apiserver starting up may close a connection it has just accepted or answered on;
    // the proxy does it on cue. The agent's reads: the periodic read of its slice, the watch.
    let s = setup("closed-read", 1);
    let (proxy, kubeconfig) = s.proxy();
    let agent = s.start_with_kubeconfig(&kubeconfig, &[]);
    s.wait_slice("first publish", |_| true);
    wait("the agent watches", || proxy.live_watches() == 1);
    let recovered = format!("the API server at {} works again", proxy.url);
    let mark = s.audit.mark();
    let slice = s.slice_path();
    let answered = |at: usize, fault: fn(&Fault) -> bool, target: &str| {
        let answers = proxy.answers_since(at);
        let closed = answers
            .iter()
            .position(|a| a.target.contains(target) && a.fault.as_ref().is_some_and(fault));
        // Sent again: the same request, forwarded this time.
        closed.is_some_and(|i| {
            answers[i + 1..].iter().any(|a| a.target == answers[i].target && a.fault.is_none())
        })
    };

    // One read closed as Go's server closes (TLS close_notify), one watch dropped (no
    // close_notify): each is sent again at once, and nothing is said.
    let at = proxy.mark();
    proxy.fail_next(1, Fault::Close, Some("GET"), Some(&slice));
    wait("the read closed and sent again", || answered(at, |f| matches!(f, Fault::Close), &slice));
    let at = proxy.mark();
    proxy.fail_next(1, Fault::Drop, Some("GET"), Some("watch=true"));
    assert_eq!(proxy.cut_watches(), 1);
    wait("the watch dropped and sent again", || {
        answered(at, |f| matches!(f, Fault::Drop), "watch=true")
    });
    s.wait_resyncs(s.audit.mark(), 2);
    assert_eq!(outages(&agent), 0, "{:#?}", problems(&agent));
    assert_eq!(problems(&agent), Vec::<String>::new());
    assert_eq!(agent.log.count(&recovered), 0);

    // Two in a row on one read: the server did not answer; said once, and once at the end.
    let at = proxy.mark();
    proxy.fail_next(2, Fault::Close, Some("GET"), Some(&slice));
    let down = agent.log.wait_for("is not working", DEADLINE);
    assert!(
        down.contains(&format!("the API server at {} is not working: ", proxy.url))
            && down.contains("connection closed before message completed"),
        "{down}"
    );
    agent.log.wait_for(&recovered, DEADLINE);
    let closes = proxy.answers_since(at).iter().filter(|a| a.fault.is_some()).count();
    assert_eq!(closes, 2, "{:#?}", proxy.answers_since(at));
    s.wait_resyncs(s.audit.mark(), 2);
    assert_eq!(outages(&agent), 1, "{:#?}", problems(&agent));
    assert_eq!(agent.log.count(&recovered), 1, "{:#?}", agent.log.lines());
    // Reads only: nothing was written for any of it.
    assert_eq!(s.slice_writes(mark).len(), 0, "{:#?}", s.slice_writes(mark));
}
}

// --- answers the real server gives only by chance: from the fault proxy -----------------------

cp_test! {
fn errors_throttling_conflicts_and_dropped_connections_mid_update_are_retried() {
    let s = setup("mid-update", 1);
    let (proxy, kubeconfig) = s.proxy();
    let agent = s.start_with_kubeconfig(&kubeconfig, &[]);
    s.wait_slice("first publish", |_| true);

    let mark = s.audit.mark();
    let slice = s.slice_path();
    let put = Some("PUT");
    proxy.fail_next(3, Fault::internal(), put, Some(&slice));
    proxy.fail_next(1, Fault::TooManyRequests { retry_after_seconds: 0 }, put, Some(&slice));
    proxy.fail_next(2, Fault::conflict("resourceslices.resource.k8s.io", &s.slice_name), put, Some(&slice));
    proxy.fail_next(2, Fault::Drop, put, Some(&slice));
    // A second GPU appears: the agent must update its slice through all of that.
    s.add_gpu(1, 1);

    let updated = s.wait_slice("updated", |v| devices(v).len() == 2);
    assert_eq!(generation(&updated), 2, "one change, one generation");
    let writes = s.slice_writes(mark);
    assert!(
        writes.len() == 1 && writes[0].verb == "update" && writes[0].ok(),
        "the server saw one update: {writes:#?}"
    );
    let answered: Vec<Option<String>> = proxy
        .answers()
        .into_iter()
        .filter(|a| a.method == "PUT")
        .map(|a| a.fault.map(|f| format!("{f:?}")))
        .collect();
    let injected: Vec<&str> =
        answered.iter().flatten().map(|f| f.split([' ', '{']).next().unwrap()).collect();
    assert_eq!(
        injected,
        ["Status", "Status", "Status", "TooManyRequests", "Status", "Status", "Drop", "Drop"],
        "{answered:?}"
    );
    assert_eq!(answered.last(), Some(&None), "the last update reached the server");
    // Conflicts re-read the slice.
    assert!(
        s.audit.since(mark).iter().any(|e| s.is_slice_get(e) && e.ok()),
        "{:#?}",
        s.audit.since(mark)
    );
    // Three identical 500s: one warning, and a recovery line.
    agent
        .log
        .wait_for("publish the ResourceSlice: works again", DEADLINE);
    assert_eq!(
        agent.log.count(&format!(
            "publish the ResourceSlice: update ResourceSlice {}: 500 InternalError: Internal error occurred: injected fault; retrying",
            s.slice_name
        )),
        1,
        "{:#?}",
        agent.log.lines()
    );
    assert!(metric(&agent, "media_capabilities_publish_errors_total") >= 3.0);
}
}

cp_test! {
fn a_throttled_write_waits_as_long_as_the_answer_asks() {
    // Priority and fairness answers 429 in plain text, with only a Retry-After header to say
    // how long to wait (kube-rs's error keeps the body alone). The real server's value depends
    // on its drop rate; the proxy's is chosen, and above the agent's own backoff.
    let s = setup("throttled", 1);
    let (proxy, kubeconfig) = s.proxy();
    let agent = s.start_with_kubeconfig(&kubeconfig, &[]);
    s.wait_slice("first publish", |_| true);

    let mark = s.audit.mark();
    proxy.fail_next(
        1,
        Fault::TooManyRequests { retry_after_seconds: 3 },
        Some("PUT"),
        Some(&s.slice_path()),
    );
    s.add_gpu(1, 1);
    s.wait_slice("updated", |v| devices(v).len() == 2);
    assert_eq!(s.slice_writes(mark).len(), 1);
    let puts: Vec<_> = proxy.answers().into_iter().filter(|a| a.method == "PUT").collect();
    assert!(puts.len() == 2 && puts[0].fault.is_some() && puts[1].fault.is_none(), "{puts:#?}");
    let waited = puts[1].at - puts[0].at;
    assert!(
        waited >= Duration::from_secs(3),
        "written again after {waited:?}, though the server asked for 3 s"
    );
    assert_eq!(
        agent.log.count(&format!(
            "publish the ResourceSlice: update ResourceSlice {}: 429 \
             TooManyRequests: Too many requests, please try again later.; retrying",
            s.slice_name
        )),
        1,
        "{:#?}",
        agent.log.lines()
    );
}
}

cp_test! {
fn a_cut_watch_and_410_gone_are_resumed_and_relisted() {
    let s = setup("cut-watch", 1);
    let (proxy, kubeconfig) = s.proxy();
    let _agent = s.start_with_kubeconfig(&kubeconfig, &[]);
    s.wait_slice("first publish", |_| true);

    wait("the agent watches", || proxy.live_watches() == 1);
    let mark = s.audit.mark();
    assert_eq!(proxy.cut_watches(), 1);
    s.audit
        .wait_until(DEADLINE, |events| {
            events[mark..].iter().any(|e| e.verb == "watch" && e.stage == "ResponseStarted")
        })
        .expect("the agent watches again");
    s.delete_slice();
    s.wait_slice("re-created through the new watch", |v| generation(v) == 2);

    // History gone: resuming is answered 410 Gone (as the watch cache answers a version it no
    // longer holds), and the agent lists again.
    wait("the agent watches", || proxy.live_watches() == 1);
    proxy.fail_next(
        1,
        Fault::Status {
            code: 410,
            reason: "Expired",
            message: "too old resource version: 1 (2)".into(),
        },
        Some("GET"),
        Some("watch=true"),
    );
    assert_eq!(proxy.cut_watches(), 1);
    let mut gone_at = None;
    wait("the agent watches again and is answered 410", || {
        gone_at = proxy
            .answers()
            .into_iter()
            .find(|a| matches!(a.fault, Some(Fault::Status { code: 410, .. })))
            .map(|a| a.wall);
        gone_at.is_some()
    });
    let gone_at = gone_at.unwrap();
    s.audit
        .wait_until(DEADLINE, |events| {
            events
                .iter()
                .any(|e| e.verb == "list" && e.resource == "resourceslices" && e.at > gone_at)
        })
        .expect("the agent re-lists after 410");
    s.delete_slice();
    s.wait_slice("re-created after the re-list", |v| generation(v) == 3);
}
}

cp_test! {
/// A load balancer's HTML page instead of the API server's answer (as while the control plane is
/// upgraded) is a server error like any other: retried, said once on one line by its HTTP code
/// and the page's own words, and the update gets through once the API answers again.
fn a_load_balancers_page_is_retried_and_said_by_its_code() {
    let s = setup("lb-page", 1);
    let (proxy, kubeconfig) = s.proxy();
    let agent = s.start_with_kubeconfig(&kubeconfig, &[]);
    s.wait_slice("first publish", |_| true);

    let mark = s.audit.mark();
    proxy.fail_next(3, Fault::GatewayPage { code: 502 }, Some("PUT"), Some(&s.slice_path()));
    s.add_gpu(1, 1);

    let slice = s.wait_slice("updated", |v| devices(v).len() == 2);
    assert_eq!(generation(&slice), 2);
    assert_eq!(s.slice_writes(mark).len(), 1);
    let puts: Vec<bool> = proxy
        .answers()
        .into_iter()
        .filter(|a| a.method == "PUT")
        .map(|a| a.fault.is_some())
        .collect();
    assert_eq!(puts, [true, true, true, false]);
    agent
        .log
        .wait_for("publish the ResourceSlice: works again", DEADLINE);
    let said = format!(
        "publish the ResourceSlice: update ResourceSlice {}: \
         502 BadGateway: <html> <head><title>502 Bad Gateway</title></head> <body> \
         <center><h1>502 Bad Gateway</h1></center> </body> </html>; retrying",
        s.slice_name
    );
    assert_eq!(agent.log.count(&said), 1, "{:#?}", agent.log.lines());
}
}

/// kube-apiserver's words for a refusal: `code`, `reason`, `message`.
fn status(code: u16, reason: &'static str, message: &str) -> Fault {
    Fault::Status {
        code,
        reason,
        message: message.to_string(),
    }
}

cp_test! {
fn no_sequence_of_answers_takes_the_node_s_slice_away() {
    // Property-style: rounds of random answers to the agent's writes (outages, throttling,
    // conflicts, refusals of every kind, dropped connections), each followed by a content change
    // the agent must get through. Whatever the sequence, the slice is never deleted or
    // re-created, and once the server answers normally again it holds what the agent wants.
    let seed = std::env::var("AGENT_PROPERTY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    eprintln!("no_sequence_of_answers_takes_the_node_s_slice_away: AGENT_PROPERTY_SEED={seed}");
    let mut rng = fastrand::Rng::with_seed(seed);
    let s = setup("any-answers", 1);
    let name = format!("resourceslices.resource.k8s.io \"{}\"", s.slice_name);
    let denied = format!(
        "{name} is forbidden: ValidatingAdmissionPolicy '{POLICY}' with binding '{POLICY}' denied request: \
         a media-capabilities agent may write only the media.liken.sh ResourceSlice of its own node"
    );
    let answers = [
        Fault::internal(),
        Fault::unavailable(),
        Fault::TooManyRequests { retry_after_seconds: 0 },
        Fault::conflict("resourceslices.resource.k8s.io", &s.slice_name),
        status(403, "Forbidden", &format!(
            "{name} is forbidden: User \"system:serviceaccount:{NAMESPACE}:any-answers\" cannot update resource \"resourceslices\" in API group \"resource.k8s.io\" at the cluster scope"
        )),
        status(401, "Unauthorized", "Unauthorized"),
        status(422, "Invalid", &denied),
        status(403, "Forbidden", &denied),
        status(422, "Invalid", &format!(
            "ResourceSlice.resource.k8s.io \"{}\" is invalid: spec.devices[0].attributes[vaDriver].string: Invalid value: \"x\": must be no more than 64 bytes",
            s.slice_name
        )),
        Fault::GatewayPage { code: 502 },
        Fault::GatewayPage { code: 503 },
        Fault::Drop,
    ];
    let (proxy, kubeconfig) = s.proxy();
    let _agent = s.start_with_kubeconfig(&kubeconfig, &[]);
    let original = s.wait_slice("first publish", |_| true);
    let records = crate::support::agent::example_records();
    let slice = s.slice_path();
    let node = path("nodes", Some(&s.node));
    let rounds = 6;
    for round in 1..=rounds {
        let mark = s.audit.mark();
        let n = rng.usize(1..=5);
        let mut injected = Vec::new();
        for _ in 0..n {
            let fault = answers[rng.usize(..answers.len())].clone();
            // Mostly on the write; sometimes on the read a conflict makes, or on the Node.
            let (method, target) = match rng.u8(..10) {
                0 => ("GET", slice.as_str()),
                1 => ("GET", node.as_str()),
                _ => ("PUT", slice.as_str()),
            };
            injected.push(format!("{fault:?} on {method} {target}"));
            proxy.fail_next(1, fault, Some(method), Some(target));
        }
        let mut record = records[round % records.len()].clone();
        set_gpu_index(&mut record, round);
        write_record(s.reports.path(), &record);
        let stored = s.wait_slice(
            &format!("round {round} (seed {seed}) after {injected:?}"),
            |v| devices(v).len() == round + 1,
        );
        assert_eq!(
            generation(&stored),
            i64::try_from(round).unwrap() + 1,
            "seed {seed}"
        );
        assert_eq!(
            stored["metadata"]["uid"], original["metadata"]["uid"],
            "never re-created (seed {seed}, {injected:?})"
        );
        let writes = s.slice_writes(mark);
        assert!(
            writes.iter().all(|e| e.verb == "update"),
            "only updates (seed {seed}, {injected:?}): {writes:#?}"
        );
        proxy.clear_faults();
    }
}
}

// --- refusals by the real server's admission and validation ----------------------------------

const POLICY: &str = "media-capabilities-node-bound";

/// A ValidatingAdmissionPolicy named `name` refusing `operation` on node `node`'s
/// ResourceSlices with `message`, and its binding: 422 Invalid, or 403 Forbidden when
/// `forbidden`, as kube-apiserver answers a denial.
fn refusal(s: &Setup, name: &str, operation: &str, message: &str, forbidden: bool) {
    // A delete has no `object`, only `oldObject`.
    let subject = if operation == "DELETE" {
        "oldObject"
    } else {
        "object"
    };
    let policy = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": ["resource.k8s.io"], "apiVersions": ["*"],
                "operations": [operation], "resources": ["resourceslices"]}]},
            "matchConditions": [{"name": "this-node",
                "expression": format!("{subject}.spec.nodeName == '{}'", s.node)}],
            "validations": [{"expression": "false", "message": message,
                "reason": if forbidden { "Forbidden" } else { "Invalid" }}]
        }
    });
    let binding = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"]}
    });
    s.kube
        .apply(&path("validatingadmissionpolicies", None), &policy);
    s.kube
        .apply(&path("validatingadmissionpolicybindings", None), &binding);
}

/// Whether a server-side dry run of `operation` on `object` (a ResourceSlice) is refused by
/// policy `name` now: the admission plugin learns of policies through informers, a moment after
/// they are stored.
fn enforced(s: &Setup, name: &str, operation: &str, object: &Value) -> bool {
    let at = path("resourceslices", object["metadata"]["name"].as_str());
    let result = match operation {
        "UPDATE" => s
            .kube
            .replace(&format!("{at}?dryRun=All"), object)
            .map(drop),
        "DELETE" => {
            let request = json!({"apiVersion": "v1", "kind": "DeleteOptions", "dryRun": ["All"]});
            s.kube.delete_with(&at, &request).map(drop)
        }
        other => panic!("no dry run for {other}"),
    };
    matches!(result, Err(kube::Error::Api(status)) if status.message.contains(name))
}

cp_test! {
fn a_write_the_server_refuses_is_kept_logged_once_and_never_answered_by_a_delete() {
    let s = setup("refused", 1);
    let agent = s.start(&[]);
    let original = s.wait_slice("first publish", |_| true);
    agent
        .log
        .wait_for(&format!("ResourceSlice {}: created", s.slice_name), DEADLINE);

    // A policy denies every update of this node's slice from now on (reason Invalid: 422).
    let message = "a media-capabilities agent may write only the media.liken.sh ResourceSlice of its own node";
    refusal(&s, POLICY, "UPDATE", message, false);
    wait("the policy is enforced", || enforced(&s, POLICY, "UPDATE", &original));
    let mark = s.audit.mark();
    s.add_gpu(1, 1);

    // Several refused attempts, with backoff between them.
    s.audit
        .wait_until(DEADLINE, |events| {
            events[mark..]
                .iter()
                .filter(|e| e.verb == "update" && e.code == 422)
                .count()
                >= 3
        })
        .expect("the agent retries the refused update");
    let line = agent.log.wait_for("denied request", DEADLINE);
    assert!(line.contains(" ERROR "), "{line}");
    assert!(
        line.contains(&format!(
            "update ResourceSlice {0}: refused, 422 Invalid: resourceslices.resource.k8s.io \"{0}\" is forbidden: ValidatingAdmissionPolicy '{POLICY}' with binding '{POLICY}' denied request: {message}",
            s.slice_name
        )),
        "the verb, the resource and the server's message: {line}"
    );
    assert!(line.contains("the stored slice is left as it is"), "{line}");
    assert_eq!(agent.log.count("denied request"), 1, "once, not per retry");
    assert!(
        agent
            .log
            .lines()
            .iter()
            .all(|l| !l.contains("{") || l.contains("probe: ")),
        "no Debug dumps: {:#?}",
        agent.log.lines()
    );
    // The slice stays as it was: never deleted, not re-created.
    let writes = s.slice_writes(mark);
    assert!(
        writes.iter().all(|e| e.verb == "update" && e.code == 422),
        "{writes:#?}"
    );
    let stored = s.slice().expect("the slice stays");
    assert_eq!(stored["metadata"]["uid"], original["metadata"]["uid"]);
    assert_eq!(devices(&stored), devices(&original));
    let (status, body) = agent.get("/readyz");
    assert_eq!(status, 503, "{body}");
    assert!(
        body.contains("the API server refuses this agent's writes"),
        "{body}"
    );
    assert!(
        metric(
            &agent,
            "media_capabilities_slice_write_refusals_total{verb=\"update\",code=\"422\"}"
        ) >= 1.0
    );

    // The policy is fixed: the update goes through, and the agent says so once.
    assert!(s.kube.delete(&path("validatingadmissionpolicybindings", Some(POLICY))));
    assert!(s.kube.delete(&path("validatingadmissionpolicies", Some(POLICY))));
    s.wait_slice("updated once the policy allows it", |v| {
        devices(v).len() == 2
    });
    agent
        .log
        .wait_for("accepts this agent's requests again", DEADLINE);
    agent
        .log
        .wait_for("publish the ResourceSlice: works again", DEADLINE);
    let (_, body) = agent.get("/readyz");
    assert!(!body.contains("refuses"), "{body}");
    assert_eq!(
        s.slice().unwrap()["metadata"]["uid"],
        original["metadata"]["uid"]
    );
}
}

cp_test! {
fn slices_in_the_way_are_replaced_or_removed() {
    let s = setup("in-the-way", 1);
    let slices = path("resourceslices", None);
    // Our name and driver, but another pool: immutable, so it can only be replaced.
    let mut other_pool = foreign_slice(&s.slice_name, DRIVER, &s.node);
    other_pool["spec"]["pool"]["name"] = json!("old-pool");
    s.kube.create(&slices, &other_pool).expect("a slice with our name");
    // Our driver and node under another name: it would compete with our pool.
    let stray = format!("{}-old", s.node);
    s.kube
        .create(&slices, &foreign_slice(&stray, DRIVER, &s.node))
        .expect("a stray slice");
    // Another node's slice of our driver: none of this agent's business.
    let other_node = format!("{}-2", s.node);
    let other = format!("{other_node}-{DRIVER}");
    s.kube
        .create(&slices, &foreign_slice(&other, DRIVER, &other_node))
        .expect("another node's slice");

    let agent = s.start(&[]);
    wait("ours replaced, the stray one deleted", || {
        s.slice().is_some_and(|v| v["spec"]["pool"]["name"] == s.node.as_str())
            && s.kube.get(&path("resourceslices", Some(&stray))).is_none()
    });
    agent.log.wait_for(
        "which cannot be changed; deleting it and creating this node's",
        DEADLINE,
    );
    let slice = s.slice().unwrap();
    assert!(
        generation(&slice) > 7,
        "never behind what was stored: {slice}"
    );
    assert_eq!(devices(&slice).len(), 1);
    assert!(s.kube.delete(&path("resourceslices", Some(&other))), "left alone");
}
}

cp_test! {
fn a_stray_that_cannot_be_deleted_is_outbid_in_the_pool() {
    // A slice of our pool under another name, at a high generation, whose deletion a policy
    // refuses (403): the scheduler takes a pool's slices of its highest generation only, so
    // ours must be above.
    let s = setup("outbid", 1);
    let stray = format!("{}-old", s.node);
    let stored = s
        .kube
        .create(&path("resourceslices", None), &foreign_slice(&stray, DRIVER, &s.node))
        .expect("a stray slice at generation 7");
    let name = "keep-the-stray";
    refusal(&s, name, "DELETE", "this slice is kept", true);
    wait("the policy is enforced", || enforced(&s, name, "DELETE", &stored));
    let agent = s.start(&[]);
    agent.log.wait_for(
        &format!("delete ResourceSlice {stray}: refused, 403 Forbidden"),
        DEADLINE,
    );
    wait("ours published above the stray", || {
        s.slice().is_some_and(|v| generation(&v) > 7)
    });
    assert!(
        s.kube.get(&path("resourceslices", Some(&stray))).is_some(),
        "the refused delete left it"
    );
    assert!(s.audit.events().iter().any(|e| e.verb == "delete" && e.code == 403));
    assert!(s.kube.delete(&path("validatingadmissionpolicybindings", Some(name))));
    assert!(s.kube.delete(&path("validatingadmissionpolicies", Some(name))));
}
}

cp_test! {
fn another_drivers_slice_with_our_name_is_left_alone_and_said() {
    let s = setup("foreign", 1);
    let theirs = s
        .kube
        .create(
            &path("resourceslices", None),
            &foreign_slice(&s.slice_name, "other.example.com", &s.node),
        )
        .expect("another driver's slice with our name");
    let mut agent = s.start(&[]);
    let line = agent
        .log
        .wait_for("belongs to driver other.example.com", DEADLINE);
    assert!(line.contains(" ERROR "), "{line}");
    assert!(
        line.contains(&format!(
            "ResourceSlice {0} belongs to driver other.example.com, not media.liken.sh, so \
             this node's slice cannot be published under its name; another driver's object is \
             left alone (hint: see who made it: kubectl get resourceslice {0} -o yaml; \
             delete it if nothing needs it)",
            s.slice_name
        )),
        "{line}"
    );
    // Retried (read again) with backoff, said once, never deleted or overwritten.
    let mark = s.audit.mark();
    s.wait_resyncs(mark, 3);
    assert_eq!(s.slice_writes(mark).len(), 0, "{:#?}", s.slice_writes(mark));
    assert_eq!(
        s.slice().unwrap()["metadata"]["uid"],
        theirs["metadata"]["uid"]
    );
    assert_eq!(agent.log.count("belongs to driver other.example.com"), 1);
    assert_eq!(agent.get("/readyz").0, 503);
    assert!(agent.running());

    // Once it is gone (the agent's watch does not see other drivers' slices), ours follows.
    s.delete_slice();
    wait("published", || {
        s.slice().is_some_and(|v| v["spec"]["driver"] == DRIVER)
    });
}
}

cp_test! {
fn throttling_by_priority_and_fairness_is_waited_out() {
    // API Priority and Fairness configured tight for this agent: a priority level with no
    // seats of its own and none to borrow, rejecting what it cannot run (a request runs there
    // only when nothing else of the level does). A second client of the same level keeps it
    // busy, so the agent's requests meet real 429s with the server's own Retry-After (1 s at
    // least); the agent's backoff alone is 400 ms.
    let s = setup("apf", 1);
    let _agent = s.start(&[]);
    s.wait_slice("first publish", |_| true);
    let busy = "apf-busy";
    s.cp.node(busy, &[]);
    let busy_token = s.cp.token(NAMESPACE, busy, &format!("agent-{busy}"), busy);
    let busy_config = s.kubeconfig.with_file_name("busy.kubeconfig");
    s.cp.token_kubeconfig(&busy_token, &busy_config);

    let level = format!("tight-{}", s.node);
    let subjects: Vec<Value> = [s.node.as_str(), busy]
        .iter()
        .map(|sa| json!({"kind": "ServiceAccount", "serviceAccount": {"namespace": NAMESPACE, "name": sa}}))
        .collect();
    s.kube.apply(
        &path("prioritylevelconfigurations", None),
        &json!({
            "apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
            "metadata": {"name": level},
            "spec": {"type": "Limited", "limited": {
                "nominalConcurrencyShares": 0, "lendablePercent": 0, "borrowingLimitPercent": 0,
                "limitResponse": {"type": "Reject"}}}
        }),
    );
    s.kube.apply(
        &path("flowschemas", None),
        &json!({
            "apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
            "metadata": {"name": level},
            "spec": {
                "priorityLevelConfiguration": {"name": level},
                "matchingPrecedence": 100,
                "distinguisherMethod": {"type": "ByUser"},
                "rules": [{"subjects": subjects,
                    "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                                       "clusterScope": true, "namespaces": ["*"]}],
                    "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]}]
            }
        }),
    );
    // The busy client: requests back to back from a few threads until the test is done.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let busy_threads: Vec<_> = (0..3)
        .map(|_| {
            let (done, config) = (std::sync::Arc::clone(&done), busy_config.clone());
            std::thread::spawn(move || {
                let kube = Kube::new(&config);
                let slices = path("resourceslices", None);
                while !done.load(std::sync::atomic::Ordering::SeqCst) {
                    let _ = kube.try_get(&slices);
                }
            })
        })
        .collect();

    let mark = s.audit.mark();
    s.audit
        .wait_until(DEADLINE, |events| {
            events[mark..].iter().any(|e| e.name == s.slice_name && e.code == 429)
        })
        .expect("the agent's reads are throttled");
    // A change to write while throttled: the update meets a 429, or gets a seat.
    let changed = s.audit.mark();
    s.add_gpu(1, 1);
    s.audit
        .wait_until(DEADLINE, |events| {
            events[changed..].iter().any(|e| e.verb == "update")
        })
        .expect("the agent tries its update");
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    for t in busy_threads {
        t.join().unwrap();
    }
    assert!(s.kube.delete(&path("flowschemas", Some(&level))));
    assert!(s.kube.delete(&path("prioritylevelconfigurations", Some(&level))));
    s.wait_slice("updated once the level lets it", |v| devices(v).len() == 2);

    // Each of the publisher's requests (on its slice by name, one after the other) after a
    // 429 came no sooner than the server asked: 1 s at least.
    let events = s.audit.since(mark);
    let publisher: Vec<&Event> = events
        .iter()
        .filter(|e| e.name == s.slice_name && e.is_complete())
        .collect();
    for pair in publisher.windows(2) {
        if pair[0].code == 429 {
            let waited = pair[1].at - pair[0].at;
            assert!(waited >= 1.0, "asked again {waited:.2} s after a 429: {publisher:#?}");
        }
    }
}
}

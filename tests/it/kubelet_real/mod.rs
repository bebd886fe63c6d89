//! The agent against the kubelet's own code (support/kubelet_real.rs: the plugin manager and the
//! DRA manager of the control plane's release) and the real control plane: the kubelet
//! registers the agent on each DRA API version, prepares and unprepares claims the real
//! scheduler allocated, registers the agent again after a restart, and wipes the node's slices at
//! its start and after the wiping delay, which the agent survives by publishing again, and shows
//! a GPU's health (the DRA manager's own handling of the agent's `DRAResourceHealth` stream) in a
//! pod's status as its probe fails and works again. On 1.34 and 1.37 (`on_1_34::NAME`,
//! `on_1_37::NAME`): 1.37's kubelet still offers v1beta1.
//! `cargo test --test it kubelet_real` runs these; the first run builds the Go programs.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::controlplane::{AGENT, NAMESPACE, installed, ok, on_each_release};
use crate::support::agent::{
    AgentProcess, FAST, example_records, set_gpu_index, write_fleet, write_record,
};
use crate::support::controlplane::{ControlPlane, Release};
use crate::support::kubelet_real::Kubelet;
use media_operator::catalogue::DRIVER;

const AGENT_BIN: &str = env!("CARGO_BIN_EXE_media-capabilities");

/// How long a registration, a publish or a scheduling decision may take (the plugin manager
/// polls every second; a loaded machine is slow).
const WAIT: Duration = Duration::from_secs(60);

/// The kubelet's `defaultWipingDelay` (pkg/kubelet/cm/dra/manager.go): it wipes a driver's
/// slices this long after its last plugin went away.
const WIPING_DELAY: Duration = Duration::from_secs(30);

/// Where the pods and claims live.
const PODS: &str = "default";

/// The class every claim here asks for: any device of ours.
const CLASS: &str = "kubelet-real";

on_each_release!(
    the_kubelet_registers_the_agent_on_v1_and_prepares_the_allocated_claim,
    a_kubelet_of_v1beta1_registers_the_agent_and_prepares_on_v1beta1,
    a_kubelet_that_knows_none_of_the_services_refuses_and_the_agent_says_why,
    the_agent_restarted_is_registered_again_and_survives_the_wipe_after_the_delay,
    the_kubelet_program_answers_bad_input_with_one_error_line,
    the_pod_status_shows_a_gpu_unhealthy_while_its_probe_fails_and_healthy_again,
);

/// One node: its plugin directories, the recorded GPU and the agent's pod-bound kubeconfig.
struct Node {
    cp: &'static ControlPlane,
    name: String,
    dir: tempfile::TempDir,
}

impl Node {
    fn new(name: &str, release: Release) -> Node {
        let cp = installed(release);
        cp.node(name, &[]);
        let dir = tempfile::tempdir().unwrap();
        write_fleet(&dir.path().join("reports"), 2);
        let token = cp.token(NAMESPACE, AGENT, &format!("{AGENT}-{name}"), name);
        cp.token_kubeconfig(&token, &dir.path().join("agent.kubeconfig"));
        Node {
            cp,
            name: name.to_string(),
            dir,
        }
    }

    fn registry_dir(&self) -> PathBuf {
        self.dir.path().join("plugins_registry")
    }

    fn dra_socket(&self) -> PathBuf {
        self.dir
            .path()
            .join("plugins")
            .join(DRIVER)
            .join("dra.sock")
    }

    /// The agent on this node, at debug level (its prepare and unprepare lines name the API).
    fn agent(&self) -> AgentProcess {
        let registry = self.registry_dir();
        let plugins = self.dir.path().join("plugins").join(DRIVER);
        let mut extra: Vec<&str> = FAST.to_vec();
        extra.extend([
            "--kubelet-registry-dir",
            registry.to_str().unwrap(),
            "--kubelet-plugins-dir",
            plugins.to_str().unwrap(),
        ]);
        AgentProcess::start_with(
            AGENT_BIN,
            &self.name,
            &["--reports".into(), self.dir.path().join("reports").into()],
            &[("RUST_LOG", "debug".into())],
            &self.dir.path().join("agent.kubeconfig"),
            &extra,
        )
    }

    fn slice_name(&self) -> String {
        format!("{}-{DRIVER}", self.name)
    }

    /// The uid of the node's slice, once it is stored and differs from `not` (a slice the
    /// kubelet wiped must come back as a new object).
    fn slice_published(&self, not: Option<&str>, agent: &AgentProcess) -> String {
        let name = self.slice_name();
        wait(&format!("the agent publishes {name}"), || {
            let out = self
                .cp
                .kubectl(&["get", "resourceslice", &name, "-o", "json"]);
            let slice: Value = serde_json::from_slice(&out.stdout).ok()?;
            let uid = slice["metadata"]["uid"].as_str()?.to_string();
            (Some(uid.as_str()) != not).then_some(uid)
        })
        .unwrap_or_else(|e| panic!("{e}; agent log:\n{}", agent.log.lines().join("\n")))
    }

    fn slice_exists(&self) -> bool {
        let out = self
            .cp
            .kubectl(&["get", "resourceslice", &self.slice_name(), "-o", "name"]);
        out.status.success()
    }

    /// Two claims for one device of [`CLASS`] each and a pod using both, kept to this node (the
    /// kubelet prepares all of a pod's claims in one call); waits until the scheduler placed the
    /// pod, so the claims are allocated and reserved for it. Returns the claims' names, uids and
    /// allocated devices.
    fn scheduled_pod(&self, pod: &str) -> [Claim; 2] {
        apply(
            self.cp,
            &json!({
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": CLASS},
                "spec": {"selectors": [{"cel": {"expression": format!("device.driver == '{DRIVER}'")}}]},
            }),
        );
        let names = [format!("{pod}-a"), format!("{pod}-b")];
        for claim in &names {
            apply(
                self.cp,
                &json!({
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaim",
                    "metadata": {"name": claim, "namespace": PODS},
                    "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": CLASS}}]}},
                }),
            );
        }
        apply(
            self.cp,
            &json!({
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": pod, "namespace": PODS},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": self.name},
                    // Each entry named as its claim: 1.34's UpdateAllocatedResourcesStatus looks
                    // a container's claim up by the ResourceClaim's name, so only then does it
                    // show the claim's health (1.37 resolves the name).
                    "resourceClaims": [
                        {"name": names[0], "resourceClaimName": names[0]},
                        {"name": names[1], "resourceClaimName": names[1]},
                    ],
                    "containers": [{
                        "name": "worker",
                        "image": "registry.k8s.io/pause:3.10",
                        "resources": {"claims": [{"name": names[0]}, {"name": names[1]}]},
                    }],
                },
            }),
        );
        wait(
            &format!("the scheduler places {pod} on {}", self.name),
            || {
                let placed = get(self.cp, &["pod", "-n", PODS, pod]);
                (placed["spec"]["nodeName"] == self.name.as_str()).then_some(())
            },
        )
        .unwrap();
        names.map(|name| {
            let claim = get(self.cp, &["resourceclaim", "-n", PODS, &name]);
            let results = &claim["status"]["allocation"]["devices"]["results"];
            assert_eq!(results[0]["driver"], DRIVER, "{claim}");
            assert_eq!(results[0]["pool"], self.name.as_str(), "{claim}");
            let uid = claim["metadata"]["uid"].as_str().unwrap().to_string();
            let device = results[0]["device"].as_str().unwrap().to_string();
            Claim { name, uid, device }
        })
    }
}

/// A claim the scheduler allocated: its name, uid and device.
struct Claim {
    name: String,
    uid: String,
    device: String,
}

/// The kubelet's answer to a prepare of `pod` with `claims` on `node`: each claim once, with the
/// device the scheduler allocated, as the agent read it from the claim.
fn prepared(pod: &str, node: &str, claims: &[Claim; 2]) -> String {
    let each: Vec<String> = claims
        .iter()
        .map(|c| format!("{}:{}:{DRIVER}/{node}/{}", c.name, c.uid, c.device))
        .collect();
    format!("prepared {PODS}/{pod} {}", each.join(" "))
}

/// The agent's log line of one call for both `claims` containing `what`, waiting for it.
fn agent_call(agent: &AgentProcess, what: &str, claims: &[Claim; 2]) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(line) = agent.log.lines().into_iter().find(|l| {
            l.contains(what)
                && claims
                    .iter()
                    .all(|c| l.contains(&format!("{PODS}/{} ({})", c.name, c.uid)))
        }) {
            return line;
        }
        assert!(
            Instant::now() < deadline,
            "no agent line with {what:?} and the claims: {:#?}",
            agent.log.lines()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn apply(cp: &ControlPlane, object: &Value) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("object.json");
    std::fs::write(&file, object.to_string()).unwrap();
    ok(cp.kubectl(&["apply", "-f", file.to_str().unwrap()]));
}

fn get(cp: &ControlPlane, args: &[&str]) -> Value {
    let mut args = [&["get"], args, &["-o", "json"]].concat();
    args.retain(|a| !a.is_empty());
    serde_json::from_str(&ok(cp.kubectl(&args))).unwrap()
}

/// Polls `check` until it gives a value, for at most [`WAIT`].
fn wait<T>(what: &str, check: impl FnMut() -> Option<T>) -> Result<T, String> {
    crate::controlplane::poll(what, WAIT, check)
}

/// The agent published before the kubelet started; the kubelet wipes the node's slices at its
/// start, registers the agent on `service` (the release's choice, or an older kubelet's), and
/// prepares and unprepares the two claims the scheduler allocated on the node, through that API.
fn registers_and_prepares(
    release: Release,
    node_name: &str,
    known: Option<&str>,
    service: &str,
    api: &str,
) {
    let node = Node::new(node_name, release);
    let agent = node.agent();
    let before = node.slice_published(None, &agent);

    let kubelet = Kubelet::start(node.cp, node_name, &node.registry_dir(), known);
    let wiped = kubelet.event_after(0, "deleted slices ", WAIT);
    assert_eq!(wiped, format!("deleted slices spec.nodeName={node_name}"));
    let registered = kubelet.event_after(0, "registered ", WAIT);
    assert_eq!(
        registered,
        format!(
            "registered {DRIVER} {service} {}",
            node.dra_socket().display()
        )
    );
    node.slice_published(Some(&before), &agent);
    agent
        .log
        .wait_for("the kubelet registered the media.liken.sh plugin", WAIT);

    let pod = format!("{node_name}-pod");
    let claims = node.scheduled_pod(&pod);
    let answer = kubelet
        .command(&format!("prepare {PODS} {pod}"))
        .unwrap_or_else(|e| panic!("{e}; {}", kubelet.log_tail()));
    assert_eq!(answer, prepared(&pod, node_name, &claims));
    let line = agent_call(&agent, "prepared 2 claim(s)", &claims);
    assert!(line.contains(&format!("api=\"{api}\"")), "{line}");

    let answer = kubelet.command(&format!("unprepare {PODS} {pod}")).unwrap();
    assert_eq!(answer, format!("unprepared {PODS}/{pod}"));
    let line = agent_call(&agent, "unprepared 2 claim(s)", &claims);
    assert!(line.contains(&format!("api=\"{api}\"")), "{line}");

    let refused: Vec<String> = kubelet
        .all()
        .into_iter()
        .filter(|l| l.starts_with("refused"))
        .collect();
    assert!(refused.is_empty(), "{refused:?}");
    assert_eq!(agent.get("/readyz").0, 200);

    // Device health: 1.37 (gate on by default) opens a v1 stream because the registration
    // lists it, and none where the list it sees has no health service (the cut list of an
    // older kubelet); 1.34 with its default gates opens none.
    let opened = "the kubelet opened a device health stream";
    if release == Release::V1_37 && known.is_none() {
        let line = agent.log.wait_for(opened, WAIT);
        assert!(line.contains("api=\"v1\""), "{line}");
    } else {
        assert_eq!(agent.log.count(opened), 0, "{:#?}", agent.log.lines());
    }
}

fn the_kubelet_registers_the_agent_on_v1_and_prepares_the_allocated_claim(release: Release) {
    registers_and_prepares(release, "kubelet-real-v1", None, "v1.DRAPlugin", "v1");
}

/// A kubelet that knows only v1beta1 (1.32 and 1.33): the release's own v1beta1 client.
fn a_kubelet_of_v1beta1_registers_the_agent_and_prepares_on_v1beta1(release: Release) {
    registers_and_prepares(
        release,
        "kubelet-real-v1beta1",
        Some("v1beta1.DRAPlugin"),
        "v1beta1.DRAPlugin",
        "v1beta1",
    );
}

/// A kubelet that knows none of what the agent offers refuses it, again at each pass of its
/// plugin manager; the agent logs the kubelet's own words once and is not ready.
fn a_kubelet_that_knows_none_of_the_services_refuses_and_the_agent_says_why(release: Release) {
    let node = Node::new("kubelet-real-refused", release);
    let agent = node.agent();
    let kubelet = Kubelet::start(
        node.cp,
        "kubelet-real-refused",
        &node.registry_dir(),
        Some("v9.DRAPlugin"),
    );
    let refused = kubelet.event_after(0, "refused ", WAIT);
    let error = format!(
        "invalid supported gRPC versions of DRA driver plugin {DRIVER} at endpoint {}: \
         empty list of supported gRPC services (aka supported versions)",
        node.dra_socket().display()
    );
    assert_eq!(refused, format!("refused {DRIVER} {error}"));
    let line = agent.log.wait_for("the kubelet refused to register", WAIT);
    assert!(
        line.contains(" WARN ")
            && line.contains(&format!(
                "RegisterPlugin error -- plugin validation failed with err: {error}"
            )),
        "{line}"
    );
    let mark = kubelet.mark();
    kubelet.event_after(mark, "refused ", WAIT);
    assert_eq!(
        agent.log.count("the kubelet refused to register"),
        1,
        "{:#?}",
        agent.log.lines()
    );
    let (status, body) = agent.get("/readyz");
    assert_eq!(status, 503, "{body}");
}

/// The agent stopped and started again within the wiping delay is registered again and keeps
/// its slice; stopped for longer, the kubelet wipes the driver's slices of the node, refuses to
/// prepare while no plugin is there, and the agent started again registers and publishes again.
fn the_agent_restarted_is_registered_again_and_survives_the_wipe_after_the_delay(release: Release) {
    let name = "kubelet-real-restart";
    let node = Node::new(name, release);
    let kubelet = Kubelet::start(node.cp, name, &node.registry_dir(), None);
    kubelet.event_after(0, "deleted slices ", WAIT);
    let mut agent = node.agent();
    let registered = kubelet.event_after(0, "registered ", WAIT);
    let first = node.slice_published(None, &agent);
    let pod = format!("{name}-pod");
    let claims = node.scheduled_pod(&pod);

    // A quick restart, as a rolling update of the DaemonSet makes it.
    let mark = kubelet.mark();
    stop(&mut agent);
    kubelet.event_after(mark, "unregistered ", WAIT);
    let mut agent = node.agent();
    assert_eq!(kubelet.event_after(mark, "registered ", WAIT), registered);
    let answer = kubelet
        .command(&format!("prepare {PODS} {pod}"))
        .unwrap_or_else(|e| panic!("{e}; {}", kubelet.log_tail()));
    assert_eq!(answer, prepared(&pod, name, &claims));
    agent_call(&agent, "prepared 2 claim(s)", &claims);

    // Gone for longer than the wiping delay. Timed from before the stop: the kubelet's delay
    // starts when it sees the socket go, which a loaded machine may tell us seconds later.
    let mark = kubelet.mark();
    let gone = Instant::now();
    stop(&mut agent);
    kubelet.event_after(mark, "unregistered ", WAIT);
    let wiped = kubelet.event_after(mark, "deleted slices ", WIPING_DELAY + WAIT);
    assert_eq!(
        wiped,
        format!("deleted slices spec.driver={DRIVER},spec.nodeName={name}")
    );
    let waited = gone.elapsed();
    assert!(
        waited + Duration::from_secs(2) >= WIPING_DELAY,
        "wiped after {waited:?}"
    );
    // Only now: a wipe during the quick restart would have come before the unregistration.
    let wipes = kubelet
        .all()
        .iter()
        .filter(|l| l.starts_with("deleted slices spec.driver="))
        .count();
    assert_eq!(wipes, 1, "{:?}", kubelet.all());
    assert!(!node.slice_exists(), "the kubelet wiped the slice");
    // The claim is still prepared, but the kubelet will not touch it without the driver.
    let refusal = kubelet
        .command(&format!("unprepare {PODS} {pod}"))
        .unwrap_err();
    assert!(
        refusal.ends_with(&format!("DRA driver {DRIVER} is not registered")),
        "{refusal}"
    );

    let mark = kubelet.mark();
    let agent = node.agent();
    assert_eq!(kubelet.event_after(mark, "registered ", WAIT), registered);
    node.slice_published(Some(&first), &agent);
    let answer = kubelet.command(&format!("unprepare {PODS} {pod}")).unwrap();
    assert_eq!(answer, format!("unprepared {PODS}/{pod}"));
    agent_call(&agent, "unprepared 2 claim(s)", &claims);
}

/// SIGTERM, and the agent's clean exit (it removes its sockets, which the plugin manager sees),
/// without waiting out the drain for the kubelet's open health stream (it ends with the agent's
/// publisher).
fn stop(agent: &mut AgentProcess) {
    agent.terminate();
    let (status, _) = agent
        .wait_exit(Duration::from_secs(30))
        .expect("the agent stops");
    assert!(status.success(), "{status:?}");
    assert_eq!(
        agent.log.count("still in flight after the drain timeout"),
        0,
        "{:#?}",
        agent.log.lines()
    );
}

/// The program's own interface: a bad start is one `error` line with the usage and exit 1; a
/// bad command, or a pod that does not exist, one `error` answer, after which it carries on.
fn the_kubelet_program_answers_bad_input_with_one_error_line(release: Release) {
    let out = std::process::Command::new(crate::support::kubelet_real::binary(release))
        .args(["--node", "x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "error --kubeconfig, --node, --registry-dir and --state-dir are required, and nothing else \
         (hint: kubelet --kubeconfig FILE --node NAME --registry-dir DIR --state-dir DIR [--services v1beta1.DRAPlugin])\n"
    );

    let out = std::process::Command::new(crate::support::kubelet_real::binary(release))
        .args([
            "--kubeconfig",
            "k",
            "--node",
            "x",
            "--registry-dir",
            "r",
            "--state-dir",
            "s",
        ])
        .args(["--feature-gates", "NoSuchGate=true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.starts_with("error --feature-gates \"NoSuchGate=true\": ")
            && said.contains("NoSuchGate")
            && said.lines().count() == 1,
        "{said}"
    );

    let name = "kubelet-real-commands";
    let node = Node::new(name, release);
    let kubelet = Kubelet::start(node.cp, name, &node.registry_dir(), None);
    assert_eq!(
        kubelet.command("prepare default").unwrap_err(),
        "\"prepare default\": unknown command (hint: prepare NAMESPACE POD | unprepare NAMESPACE POD | health NAMESPACE POD | stop)"
    );
    assert_eq!(
        kubelet.command("prepare default no-such-pod").unwrap_err(),
        "prepare: get pod default/no-such-pod: pods \"no-such-pod\" not found"
    );
    // Still serving: a pod without claims has nothing to prepare.
    apply(
        node.cp,
        &json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": PODS},
            "spec": {"nodeName": name, "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
        }),
    );
    assert_eq!(
        kubelet.command(&format!("prepare {PODS} {name}")),
        Ok(format!("prepared {PODS}/{name}"))
    );
}

/// GPU number `index` of the node's recorded fleet, working (the example fleet's first record).
fn working(index: usize) -> Value {
    let mut record = example_records()[0].clone();
    set_gpu_index(&mut record, index);
    record
}

/// GPU number `index`, whose probe timed out: its driver stopped answering.
fn not_answering(index: usize) -> Value {
    let mut record = working(index);
    record.as_object_mut().unwrap().remove("report");
    record["failure"] = json!(
        "probe of /dev/dri/renderD129 (0000:02:00.0) timed out after 15.0s and was killed with its process group; libva said nothing"
    );
    record["failure_kind"] = json!("not-answering");
    record
}

/// What the kubelet's `health` command answers for `pod`: each claim's device, Unhealthy if it
/// is `failed`, else Healthy.
fn health(pod: &str, node: &str, claims: &[Claim; 2], failed: Option<&str>) -> String {
    let mut entries: Vec<String> = claims
        .iter()
        .map(|c| {
            let claim = &c.name;
            let h = if Some(c.device.as_str()) == failed {
                "Unhealthy"
            } else {
                "Healthy"
            };
            format!("worker:claim:{claim}:{DRIVER}/{node}/{}={h}", c.device)
        })
        .collect();
    entries.sort();
    format!("health {PODS}/{pod} {}", entries.join(" "))
}

/// The kubelet's DRA manager with the health gate on (1.34: alpha, set here; 1.37: beta and on
/// by default) follows the agent's health stream: the pod that holds both GPUs shows both
/// Healthy; one GPU's probe fails (its report now says its driver stopped answering), and the
/// pod shows that device Unhealthy (1.37 also says why, in the message v1 carries) and the other
/// Healthy (on 1.37 both claims may share one GPU: its devices allow multiple allocations); the
/// probe works again, and the pod shows it Healthy again. The kubelet picks v1 where
/// it has it (1.37) and v1alpha1 otherwise.
fn the_pod_status_shows_a_gpu_unhealthy_while_its_probe_fails_and_healthy_again(release: Release) {
    let name = "kubelet-real-health";
    let node = Node::new(name, release);
    // Both GPUs working (the fleet's second record is a failed one).
    let reports = node.dir.path().join("reports");
    write_record(&reports, &working(1));
    let agent = node.agent();
    node.slice_published(None, &agent);
    let gates = (release == Release::V1_34).then_some("ResourceHealthStatus=true");
    let kubelet = Kubelet::start_with(node.cp, name, &node.registry_dir(), None, gates);
    kubelet.event_after(0, "registered ", WAIT);
    let api = if release == Release::V1_34 {
        "v1alpha1"
    } else {
        "v1"
    };
    let opened = agent
        .log
        .wait_for("the kubelet opened a device health stream", WAIT);
    assert!(opened.contains(&format!("api=\"{api}\"")), "{opened}");

    let pod = format!("{name}-pod");
    let claims = node.scheduled_pod(&pod);
    let answer = kubelet
        .command(&format!("prepare {PODS} {pod}"))
        .unwrap_or_else(|e| panic!("{e}; {}", kubelet.log_tail()));
    assert_eq!(answer, prepared(&pod, name, &claims));
    let both_healthy = health(&pod, name, &claims, None);
    kubelet_health(&kubelet, &pod, |h| h == both_healthy);

    // The first claim's GPU stops answering.
    let failed = &claims[0].device;
    let index = gpu_index(failed);
    write_record(&reports, &not_answering(index));
    let unhealthy = health(&pod, name, &claims, Some(failed));
    let shown = kubelet_health(&kubelet, &pod, |h| {
        // 1.37 adds the message after the first device's health.
        strip_message(h) == unhealthy
    });
    if release == Release::V1_34 {
        assert_eq!(shown, unhealthy, "no message on 1.34");
    } else {
        assert!(
            shown.contains("=Unhealthy:\"probe failed: probe of /dev/dri/renderD129 (0000:02:00.0) timed out after 15.0s"),
            "{shown}"
        );
    }

    // It answers again.
    write_record(&reports, &working(index));
    kubelet_health(&kubelet, &pod, |h| h == both_healthy);
    let answer = kubelet.command(&format!("unprepare {PODS} {pod}")).unwrap();
    assert_eq!(answer, format!("unprepared {PODS}/{pod}"));
}

/// The index `write_fleet` gave the GPU named `device` (`pci-0000-<i+1>-00-0`).
fn gpu_index(device: &str) -> usize {
    let bus = device
        .strip_prefix("pci-0000-")
        .and_then(|d| d.strip_suffix("-00-0"))
        .unwrap_or_else(|| panic!("not a GPU of write_fleet: {device}"));
    usize::from_str_radix(bus, 16).unwrap() - 1
}

/// The health answer without the Go-quoted message after an entry's health (1.37).
fn strip_message(answer: &str) -> String {
    let mut out = String::new();
    let mut rest = answer;
    while let Some(at) = rest.find(":\"") {
        out.push_str(&rest[..at]);
        let quoted = &rest[at + 2..];
        let mut escaped = false;
        let end = quoted
            .char_indices()
            .find(|&(_, c)| {
                let close = c == '"' && !escaped;
                escaped = c == '\\' && !escaped;
                close
            })
            .map_or(quoted.len(), |(i, _)| i + 1);
        rest = &quoted[end..];
    }
    out.push_str(rest);
    out
}

/// Asks the kubelet for `pod`'s device health until `wanted` holds; returns that answer.
fn kubelet_health(kubelet: &Kubelet, pod: &str, wanted: impl Fn(&str) -> bool) -> String {
    let mut last = String::new();
    wait("the pod's device health", || {
        last = kubelet
            .command(&format!("health {PODS} {pod}"))
            .unwrap_or_else(|e| panic!("{e}; {}", kubelet.log_tail()));
        if wanted(&last) {
            return Some(last.clone());
        }
        std::thread::sleep(Duration::from_millis(200));
        None
    })
    .unwrap_or_else(|e| panic!("{e}; last: {last}; {}", kubelet.log_tail()))
}

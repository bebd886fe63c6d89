//! The agent's log fed hostile text: a stand-in API server (support/fakeapi.rs; the real one
//! validates names, and its messages are its own) answers with a stray slice whose name holds a
//! bidi override and an escape sequence, and refuses with a message that holds them and a
//! newline. Each reaches the log escaped, on one line, as the plugin's output shows them.

use std::time::Duration;

use crate::support::agent::{AgentProcess, write_fleet};
use crate::support::fakeapi::{FakeApi, Reply};
use media_operator::catalogue::DRIVER;
use serde_json::json;

const AGENT: &str = env!("CARGO_BIN_EXE_media-capabilities");

/// What would act on a terminal: a right-to-left override, an isolate, ESC (a screen clear),
/// a C1 CSI, a newline that would forge a log line.
const HOSTILE: &str = "\u{202e}evil\u{2066}\x1b[2J\u{9b}31m\nERROR forged";

fn hostile_api() -> FakeApi {
    FakeApi::start(|method, target| {
        let refused = || {
            Reply::status(
                403,
                403,
                "Forbidden",
                &format!("refused by a webhook: {HOSTILE}"),
            )
        };
        match method {
            "GET" if target.contains("/nodes/") => Reply::json(
                200,
                &json!({"kind": "Node", "apiVersion": "v1",
                        "metadata": {"name": "n1", "uid": "node-uid", "resourceVersion": "1"}}),
            ),
            "GET" if target.contains("resourceslices") && !target.contains("watch=") => {
                Reply::json(
                    200,
                    &json!({"kind": "ResourceSliceList", "apiVersion": "resource.k8s.io/v1",
                        "metadata": {"resourceVersion": "5"},
                        "items": [{"metadata": {"name": format!("stray-{HOSTILE}"), "uid": "stray-uid",
                                               "resourceVersion": "4", "generation": 1},
                                   "spec": {"driver": DRIVER, "nodeName": "n1",
                                            "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                                            "devices": []}}]}),
                )
            }
            _ => refused(),
        }
    })
}

#[test]
fn the_log_escapes_names_and_messages_from_api_answers() {
    let api = hostile_api();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = api.kubeconfig(dir.path());
    let reports = dir.path().join("reports");
    write_fleet(&reports, 1);
    let agent = AgentProcess::start(AGENT, "n1", &reports, &kubeconfig, &[]);
    let deadline = Duration::from_secs(30);
    let escaped = r"\u{202e}evil\u{2066}\x1b[2J\u{9b}31m\nERROR forged";
    let stray = agent
        .log
        .wait_for("deleting ResourceSlice stray-", deadline);
    assert!(stray.contains(&format!("stray-{escaped}")), "{stray}");
    let refused = agent.log.wait_for("refused by a webhook", deadline);
    // A server's message is cut to one line first (its controls spaces), then escaped.
    assert!(
        refused.contains(r"refused by a webhook: \u{202e}evil\u{2066} [2J 31m ERROR forged"),
        "{refused}"
    );
    for line in agent.log.lines() {
        assert!(
            !line.chars().any(|c| c.is_control()
                || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')),
            "raw control character in {line:?}"
        );
        assert!(!line.starts_with("ERROR forged"), "a forged line: {line:?}");
    }
}

//! `kubectl media class` as a user runs it: the real binary with a scrubbed environment, its
//! YAML compared with the product document's as parsed objects, its help and errors snapshotted.

use std::path::Path;
use std::process::{Command, Output};

use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaimTemplate};
use serde::Deserialize;
use serde_json::Value;

fn kubectl_media(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kubectl-media"))
        .args(args)
        .env_clear()
        .env("NO_COLOR", "1")
        .env("COLUMNS", "100")
        .output()
        .expect("run kubectl-media")
}

/// Runs a command that must succeed and returns its stdout.
fn stdout_of(args: &[&str]) -> String {
    let out = kubectl_media(args);
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Parses multi-document YAML into JSON values, as `kubectl apply -f -` reads it.
fn documents(yaml: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(yaml)
        .map(|doc| Value::deserialize(doc).expect("valid YAML"))
        .collect()
}

fn fixture(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/spec")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    let mut docs = documents(&text);
    assert_eq!(docs.len(), 1, "{}", path.display());
    docs.remove(0)
}

#[test]
fn reproduces_the_documents_decode_10bit_class() {
    let docs = documents(&stdout_of(&[
        "class",
        "decode-10bit",
        "--decode",
        "HEVCMain10",
        "--scale",
        "10bit",
    ]));
    assert_eq!(docs, [fixture("decode-10bit-class.yaml")]);
}

#[test]
fn reproduces_the_documents_claim_template_and_render_class() {
    let docs = documents(&stdout_of(&[
        "class",
        "decode-10bit",
        "--decode",
        "HEVCMain10",
        "--scale",
        "10bit",
        "--claim",
        "--with-render-class",
    ]));
    assert_eq!(
        docs,
        [
            fixture("decode-10bit-class.yaml"),
            fixture("gpu-render-class.yaml"),
            fixture("decode-10bit-template.yaml"),
        ]
    );
}

#[test]
fn reproduces_the_documents_request_level_selectors() {
    let docs = documents(&stdout_of(&[
        "class",
        "--selector",
        "--decode",
        "VP9",
        "--scale",
        "8bit",
    ]));
    assert_eq!(docs.len(), 1);
    assert_eq!(docs[0]["kind"], "ResourceClaimTemplate");
    let requests = &docs[0]["spec"]["spec"]["devices"]["requests"];
    let expected = fixture("vp9-8bit-request.yaml");
    assert_eq!(requests[1], expected[0]);
    assert_eq!(requests[0]["exactly"]["deviceClassName"], "gpu-render");
}

/// Beside each vendor's driver: the render class of its whole GPUs, as the render-driver table
/// writes it, and the template claims through it with the pciBusID constraint as beside liken.
#[test]
fn each_render_driver_gets_its_class_of_whole_gpus() {
    use media_operator::render_drivers::ALL;
    for driver in ALL {
        let yaml = stdout_of(&[
            "class",
            "decode-10bit",
            "--decode",
            "HEVCMain10",
            "--scale",
            "10bit",
            "--claim",
            "--with-render-class",
            "--render-driver",
            driver.name,
        ]);
        let objects = documents(&yaml);
        assert_eq!(objects.len(), 3, "{yaml}");
        let render = &objects[1];
        assert_eq!(render["metadata"]["name"], driver.render_class, "{yaml}");
        assert_eq!(
            render["spec"]["selectors"][0]["cel"]["expression"],
            driver.whole_gpu_cel()
        );
        let devices = &objects[2]["spec"]["spec"]["devices"];
        assert_eq!(
            devices["requests"][0]["exactly"]["deviceClassName"],
            driver.render_class
        );
        assert_eq!(
            devices["constraints"][0]["matchAttribute"],
            "resource.kubernetes.io/pciBusID"
        );
    }
    // liken stays the product document's, byte for byte, with or without the flag.
    let plain = stdout_of(&[
        "class",
        "decode-10bit",
        "--decode",
        "HEVCMain10",
        "--scale",
        "10bit",
        "--claim",
        "--with-render-class",
    ]);
    let named = stdout_of(&[
        "class",
        "decode-10bit",
        "--decode",
        "HEVCMain10",
        "--scale",
        "10bit",
        "--claim",
        "--with-render-class",
        "--render-driver",
        "liken.sh",
    ]);
    assert_eq!(plain, named);
}

#[test]
fn with_base_class_prints_the_catch_all_class() {
    let docs = documents(&stdout_of(&[
        "class",
        "--selector",
        "--decode",
        "VP9",
        "--with-base-class",
    ]));
    assert_eq!(docs.len(), 2);
    assert_eq!(docs[0]["kind"], "DeviceClass");
    assert_eq!(docs[0]["metadata"]["name"], "media-gpu");
    assert_eq!(
        docs[0]["spec"]["selectors"][0]["cel"]["expression"],
        "device.driver == \"media.liken.sh\"\n"
    );
    assert_eq!(docs[1]["metadata"]["name"], "decode-vp9");
}

#[test]
fn names_come_from_flags_when_not_given() {
    let docs = documents(&stdout_of(&[
        "class",
        "--scale",
        "10bit",
        "--decode",
        "HEVCMain10",
        "--claim",
    ]));
    assert_eq!(docs[0]["metadata"]["name"], "decode-hevcmain10-scale-10bit");
    assert_eq!(docs[1]["metadata"]["name"], "decode-hevcmain10-scale-10bit");
    assert_eq!(
        docs[1]["spec"]["spec"]["devices"]["requests"][1]["exactly"]["deviceClassName"],
        "decode-hevcmain10-scale-10bit"
    );

    let docs = documents(&stdout_of(&[
        "class",
        "mine",
        "--encode",
        "H264",
        "--claim=transcode",
    ]));
    assert_eq!(docs[0]["metadata"]["name"], "mine");
    assert_eq!(docs[1]["metadata"]["name"], "transcode");
    assert_eq!(
        docs[1]["spec"]["spec"]["devices"]["requests"][1]["name"],
        "encodes"
    );

    let docs = documents(&stdout_of(&[
        "class",
        "vp9",
        "--selector",
        "--decode",
        "VP9",
    ]));
    assert_eq!(docs[0]["metadata"]["name"], "vp9");
}

#[test]
fn values_ignore_case_prefix_order_and_repeats() {
    let canonical = stdout_of(&[
        "class",
        "x",
        "--decode",
        "HEVCMain10",
        "--decode",
        "VP9",
        "--encode",
        "H264LowPower",
    ]);
    for args in [
        &[
            "class",
            "x",
            "--decode",
            "hevcmain10,vp9",
            "--encode",
            "h264lowpower",
        ][..],
        &[
            "class",
            "x",
            "--decode",
            "decodeVP9",
            "--encode",
            "encodeH264LowPower",
            "--decode",
            "DECODEHEVCMAIN10",
        ],
        &[
            "class",
            "x",
            "--encode",
            "H264LowPower",
            "--decode",
            "VP9,HEVCMain10,vp9",
        ],
        // The shorthand `caps` prints.
        &[
            "class",
            "x",
            "--decode",
            "HEVC-10,VP9",
            "--encode",
            "H264-LP",
        ],
    ] {
        assert_eq!(stdout_of(args), canonical, "{args:?}");
    }
}

#[test]
fn json_prints_the_same_objects_as_a_list() {
    let args = [
        "class",
        "decode-10bit",
        "--decode",
        "HEVCMain10",
        "--scale",
        "10bit",
        "--claim",
        "--with-render-class",
    ];
    let yaml = documents(&stdout_of(&args));
    let json: Value =
        serde_json::from_str(&stdout_of(&[&args[..], &["-o", "json"]].concat())).unwrap();
    assert_eq!(json["apiVersion"], "v1");
    assert_eq!(json["kind"], "List");
    assert_eq!(json["items"].as_array().unwrap(), &yaml);
}

/// Every object survives a round trip through the typed Kubernetes API structs unchanged: no
/// unknown or misspelt field, no value of the wrong type.
#[test]
fn output_matches_the_kubernetes_schema() {
    let cases: &[&[&str]] = &[
        &[
            "class",
            "--decode",
            "AV1Main10",
            "--claim",
            "--with-render-class",
        ],
        &[
            "class",
            "--selector",
            "--encode",
            "HEVCMain10LowPower",
            "--scale",
            "8bit,10bit",
            "--with-base-class",
            "--with-render-class",
        ],
        &[
            "class",
            "all",
            "--decode",
            "AV1Main,AV1Main10,H264,HEVCMain,HEVCMain10,MPEG2,VC1,VP8,VP9,VP9Profile2",
            "--encode",
            "H264,H264LowPower,HEVCMain,HEVCMain10,HEVCMain10LowPower,HEVCMainLowPower",
            "--scale",
            "8bit,10bit",
            "--claim",
            "--render-class",
            "display-render",
        ],
    ];
    for args in cases {
        for doc in documents(&stdout_of(args)) {
            let round_trip = match doc["kind"].as_str() {
                Some("DeviceClass") => serde_json::to_value(
                    serde_json::from_value::<DeviceClass>(doc.clone()).unwrap(),
                ),
                Some("ResourceClaimTemplate") => serde_json::to_value(
                    serde_json::from_value::<ResourceClaimTemplate>(doc.clone()).unwrap(),
                ),
                other => panic!("unexpected kind {other:?}"),
            }
            .unwrap();
            assert_eq!(round_trip, doc, "{args:?}");
            assert_eq!(doc["apiVersion"], "resource.k8s.io/v1");
        }
    }
}

#[test]
fn generated_yaml() {
    insta::assert_snapshot!(
        "class-claim-with-render-class",
        stdout_of(&[
            "class",
            "decode-10bit",
            "--decode",
            "HEVCMain10",
            "--scale",
            "10bit",
            "--claim",
            "--with-render-class"
        ])
    );
    insta::assert_snapshot!(
        "class-selector-with-base-class",
        stdout_of(&[
            "class",
            "--selector",
            "--decode",
            "VP9",
            "--scale",
            "8bit",
            "--with-base-class"
        ])
    );
    insta::assert_snapshot!(
        "class-json",
        stdout_of(&["class", "--encode", "HEVCMain", "-o", "json"])
    );
}

#[test]
fn help() {
    insta::assert_snapshot!("help-root", stdout_of(&["--help"]));
    insta::assert_snapshot!("help-class", stdout_of(&["class", "--help"]));
    // `kubectl media` alone prints the help (exit 0), as `kubectl` alone does.
    assert_eq!(stdout_of(&[]), stdout_of(&["--help"]));
}

/// Every bad input: one line on stderr naming the problem and the fix, exit 2, nothing on stdout.
#[test]
fn errors() {
    let cases: &[&[&str]] = &[
        &["class", "--decode", "HEVCMain12"],
        &["class", "--decode", "scale8bit"],
        &["class", "--encode", "ProRes"],
        &["class", "--scale", "12bit"],
        &["class"],
        &["class", "x"],
        &["class", "Decode10", "--decode", "VP9"],
        &["class", "decode_10", "--decode", "VP9"],
        &["class", "-decode", "--decode", "VP9"],
        &["class", "--decode", "VP9", "--claim=Bad"],
        &["class", "--decode", "VP9", "--claim="],
        &[
            "class",
            "--decode",
            "VP9",
            "--render-class",
            "gpu..render",
            "--claim",
        ],
        &["class", "--decode", "VP9", "--base-class", "media"],
        &["class", "--decode", "VP9", "--with-base-class"],
        &[
            "class",
            "--decode",
            "VP9",
            "--render-class",
            "display-render",
        ],
        &[
            "class",
            "gpu-render",
            "--decode",
            "VP9",
            "--with-render-class",
        ],
        &[
            "class",
            "--selector",
            "--decode",
            "VP9",
            "--with-base-class",
            "--with-render-class",
            "--base-class",
            "gpu-render",
        ],
        &["class", "a", "--selector", "--decode", "VP9", "--claim=b"],
        // The agent's wiring class is never written, claimed through or narrowed.
        &["class", "media-render", "--decode", "VP9"],
        &[
            "class",
            "--decode",
            "VP9",
            "--claim",
            "--render-class",
            "media-render",
        ],
        &[
            "class",
            "--selector",
            "--decode",
            "VP9",
            "--base-class",
            "media-render",
        ],
        &[
            "class",
            "--decode",
            "VP9",
            "--claim",
            "--render-driver",
            "intel",
        ],
        &[
            "class",
            "--decode",
            "VP9",
            "--render-driver",
            "gpu.intel.com",
        ],
        &["class", "--decode", "VP9", "-o", "table"],
        &["class", "--decode", "VP9", "--bogus"],
        &["classs"],
    ];
    let mut transcript = String::new();
    for args in cases {
        let out = kubectl_media(args);
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?} wrote to stdout");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.starts_with("error: "), "{args:?}: {stderr}");
        assert!(
            stderr.contains("hint: ") || stderr.contains("valid: "),
            "{args:?}: {stderr}"
        );
        transcript.push_str(&format!("$ kubectl media {}\n{stderr}\n", args.join(" ")));
    }
    insta::assert_snapshot!("class-errors", transcript);
}

#[test]
fn a_closed_pipe_ends_quietly() {
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_kubectl-media"))
        .args(["class", "--decode", "VP9", "--claim", "--with-render-class"])
        .env_clear()
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// kubectl (1.26+) completes `kubectl media ...` by running the `kubectl_complete-media` shim we
/// ship; checked with the real kubectl; ignored, with the install hint, where it is not installed.
#[test]
#[cfg_attr(not(have_kubectl), ignore = "needs kubectl on PATH (kubectl 1.32)")]
fn kubectl_completes_through_the_shipped_shim() {
    let bin = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_kubectl-media"),
        bin.path().join("kubectl-media"),
    )
    .unwrap();
    let shim = Path::new(env!("CARGO_MANIFEST_DIR")).join("completions/kubectl_complete-media");
    std::os::unix::fs::symlink(&shim, bin.path().join("kubectl_complete-media")).unwrap();
    let path = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let complete = |words: &[&str]| {
        let out = Command::new("kubectl")
            .arg("__complete")
            .arg("media")
            .args(words)
            .env("PATH", &path)
            .env("HOME", bin.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    assert_eq!(
        complete(&["cl"]),
        "class\tWrite a DeviceClass (and claim template) that selects GPUs by capability\n:4\n"
    );
    let values = complete(&["class", "--scale", ""]);
    assert!(
        values.starts_with("8bit\t") && values.contains("\n10bit\t"),
        "{values}"
    );
    assert_eq!(complete(&["caps", "-f", ""]), ":0\n");
    // kubectl passes its own flags to the plugin; one in front is the plugin's to complete.
    assert_eq!(complete(&["--kubeconfig", ""]), ":0\n");
    assert_eq!(
        complete(&["caps", "--decode", "HEVC-"]).lines().next(),
        Some("HEVC-10\tdecodes HEVC Main 10 profile (10-bit 4:2:0) in hardware")
    );
    assert_eq!(complete(&["caps", "--kubernetes-version", ""]), ":1\n");
    // The table's lowercase habit: `hevc` completes to the catalogue's spelling.
    let values = complete(&["class", "--decode", "hevc"]);
    assert!(
        values.starts_with("HEVCMain\t") && values.contains("\nHEVCMain10\t"),
        "{values}"
    );
}

/// `--tolerate` (issue 34): kubectl's taint syntax becomes a toleration on both of the
/// template's requests (the agent taints the media device, a vendor the render device), the
/// class itself unchanged; what the API server would refuse is refused in one line, and
/// without a template the flag is refused as unused.
#[test]
fn tolerate_writes_the_toleration_into_both_requests_of_the_template() {
    let base = [
        "class",
        "decode-10bit",
        "--decode",
        "HEVCMain10",
        "--scale",
        "10bit",
    ];
    let with = |extra: &[&str]| documents(&stdout_of(&[&base[..], extra].concat()));
    let plain = with(&["--claim"]);
    let tolerant = with(&[
        "--claim",
        "--tolerate",
        "media.liken.sh/unhealthy",
        "--tolerate",
        "gpu.nvidia.com/xid=79:NoExecute",
    ]);
    assert_eq!(plain[0], tolerant[0], "the class is the same");
    let expected = serde_json::json!([
        {"key": "media.liken.sh/unhealthy", "operator": "Exists"},
        {"key": "gpu.nvidia.com/xid", "operator": "Equal", "value": "79", "effect": "NoExecute"}
    ]);
    let requests = tolerant[1]["spec"]["spec"]["devices"]["requests"]
        .as_array()
        .unwrap();
    assert_eq!(requests.len(), 2);
    for request in requests {
        assert_eq!(request["exactly"]["tolerations"], expected, "{request}");
    }
    // Apart from the tolerations, the template is the product document's.
    let mut stripped = tolerant[1].clone();
    for request in stripped["spec"]["spec"]["devices"]["requests"]
        .as_array_mut()
        .unwrap()
    {
        request["exactly"]
            .as_object_mut()
            .unwrap()
            .remove("tolerations");
    }
    assert_eq!(stripped, plain[1]);
    // --selector writes a template too.
    let selector = documents(&stdout_of(&[
        "class",
        "--selector",
        "--decode",
        "VP9",
        "--tolerate",
        "media.liken.sh/unhealthy:NoSchedule",
    ]));
    assert_eq!(
        selector[0]["spec"]["spec"]["devices"]["requests"][1]["exactly"]["tolerations"],
        serde_json::json!([{"key": "media.liken.sh/unhealthy", "operator": "Exists", "effect": "NoSchedule"}])
    );

    let refused = |extra: &[&str]| {
        let out = kubectl_media(&[&base[..], extra].concat());
        assert_eq!(out.status.code(), Some(2), "{extra:?}");
        assert!(out.stdout.is_empty(), "nothing half-written");
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        stderr
    };
    assert!(
        refused(&["--tolerate", "a"])
            .contains("--tolerate only applies with --claim or --selector"),
    );
    assert!(
        refused(&["--claim", "--tolerate", "a:PreferNoSchedule"])
            .contains("is not an effect a toleration can name (hint: NoSchedule or NoExecute"),
    );
    assert!(refused(&["--claim", "--tolerate", "Bad_Prefix/x"]).contains("not a DNS subdomain"));
}

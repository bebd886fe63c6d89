//! What `caps` reads of a ResourceClaim: its name, the devices allocated to it
//! (`status.allocation.devices.results`) and what it is reserved for (`status.reservedFor`),
//! read straight from the text as the reader meets them. Nothing of the spec: a fleet has as
//! many claims as GPUs, and the whole typed claim is read through a map of JSON values first
//! (`why` reads whole claims; it reads few). `caps --claims` on 40,000 claims: benches/caps.rs.

use serde::Deserialize;

use ustr::Ustr;

/// A ResourceClaim as `caps` keeps it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllocatedClaim {
    pub namespace: String,
    pub name: String,
    /// Empty when the claim is not allocated.
    pub results: Vec<DeviceResult>,
    pub reserved_for: Vec<Consumer>,
}

impl AllocatedClaim {
    pub(crate) fn new(namespace: String, name: String, status: ClaimStatus) -> AllocatedClaim {
        AllocatedClaim {
            namespace,
            name,
            results: status
                .allocation
                .and_then(|a| a.devices)
                .and_then(|d| d.results)
                .unwrap_or_default(),
            reserved_for: status.reserved_for.unwrap_or_default(),
        }
    }
}

/// One allocated device (resource.k8s.io/v1 `DeviceRequestAllocationResult`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct DeviceResult {
    pub request: String,
    #[serde(deserialize_with = "recent")]
    pub driver: Ustr,
    #[serde(deserialize_with = "recent")]
    pub pool: Ustr,
    pub device: Ustr,
}

/// How many of the last names read on a thread [`recent`] compares against.
const RECENT: usize = 4;

thread_local! {
    static LAST: std::cell::Cell<([Option<Ustr>; RECENT], usize)> =
        const { std::cell::Cell::new(([None; RECENT], 0)) };
}

/// Interns a name that repeats from one result to the next (the driver, the pool of a node's
/// claims): compared with the last few read on this thread first, so most cost a byte
/// comparison, not the interner's hash and lock. A fleet's claims have 80,000 results.
fn recent<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Ustr, D::Error> {
    struct Recent;
    impl serde::de::Visitor<'_> for Recent {
        type Value = Ustr;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a string")
        }
        fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Ustr, E> {
            Ok(LAST.with(|last| {
                let (mut names, next) = last.get();
                if let Some(name) = names.iter().flatten().find(|n| n.as_str() == text) {
                    return *name;
                }
                let name = Ustr::from(text);
                names[next] = Some(name);
                last.set((names, (next + 1) % RECENT));
                name
            }))
        }
    }
    deserializer.deserialize_str(Recent)
}

/// What a claim is reserved for (`ResourceClaimConsumerReference`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Consumer {
    #[serde(default)]
    pub api_group: Option<String>,
    pub resource: String,
    pub name: String,
}

/// `status` of a ResourceClaim, the fields `caps` reads; `null` where a list may be is none, as
/// k8s-openapi reads it.
#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct ClaimStatus {
    pub(crate) allocation: Option<Allocation>,
    pub(crate) reserved_for: Option<Vec<Consumer>>,
}

#[derive(Default, Deserialize)]
#[serde(default)]
pub(crate) struct Allocation {
    devices: Option<DeviceAllocation>,
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct DeviceAllocation {
    results: Option<Vec<DeviceResult>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recent_names_intern_as_the_interner_does_past_the_few_kept() {
        // More names than are kept, each twice, one escaped: every one its interned self.
        let names: Vec<String> = (0..RECENT * 2 + 1).map(|i| format!("pool-{i}")).collect();
        for name in names.iter().chain(&names).chain(names.iter().rev()) {
            let text = format!(
                r#"{{"request": "gpu", "driver": "liken\u002esh", "pool": "{name}", "device": "d"}}"#
            );
            let result: DeviceResult = serde_json::from_str(&text).unwrap();
            assert_eq!(result.pool, Ustr::from(name));
            assert_eq!(result.driver, Ustr::from("liken.sh"));
        }
        let wrong = serde_json::from_str::<DeviceResult>(
            r#"{"request": "gpu", "driver": 7, "pool": "p", "device": "d"}"#,
        );
        assert!(wrong.unwrap_err().to_string().contains("expected a string"));
    }
}

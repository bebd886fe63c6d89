//! Who holds which GPU: the allocation results of ResourceClaims (`status.allocation.devices
//! .results`, each naming driver, pool and device) joined to the inventory's GPUs, with the pods
//! each claim is reserved for (`status.reservedFor`). A GPU is held through a render driver's
//! device (what a workload receives: the whole GPU's render node, or a MIG device, partition or
//! VF at its address) and through its media device (the statement a claim asked
//! for beside it); both are counted apart.
//!
//! Pure: it takes claims already read (from the cluster or `-f` files) and returns data.

use crate::fleet::allocated::AllocatedClaim;

type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
type HashSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

/// The most allocation results the API server lets a claim have (`AllocationResultsMaxSize`).
const MAX_RESULTS: usize = 32;
use crate::fleet::inventory::Inventory;
use crate::render_drivers::RenderDriver;

/// One claim's hold on one GPU, borrowing the claim's names: 40,000 claims, no copies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Hold<'a> {
    pub namespace: &'a str,
    pub claim: &'a str,
    /// The requests whose results are on this GPU, in result order (`gpu`, `decodes`).
    pub requests: Vec<&'a str>,
    pub render_node: bool,
    pub media_device: bool,
    /// `namespace/name` of the pods the claim is reserved for; empty when none is.
    pub pods: Vec<String>,
}

/// The holds of every GPU, parallel to [`Inventory::gpus`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Holders<'a> {
    pub per_gpu: Vec<Vec<Hold<'a>>>,
    /// Allocated claims whose devices are on none of the inventory's GPUs (another driver's
    /// devices only, or a pool no longer published).
    pub elsewhere: usize,
}

impl Holders<'_> {
    /// How many claims hold the GPU's render node, and its media device.
    pub(crate) fn counts(&self, gpu: usize) -> (usize, usize) {
        let holds = &self.per_gpu[gpu];
        (
            holds.iter().filter(|h| h.render_node).count(),
            holds.iter().filter(|h| h.media_device).count(),
        )
    }
}

/// Joins the claims' allocation results to the inventory's GPUs.
pub(crate) fn holders<'a>(inventory: &Inventory, claims: &'a [AllocatedClaim]) -> Holders<'a> {
    let mut holders = Holders {
        per_gpu: vec![Vec::new(); inventory.gpus.len()],
        elsewhere: 0,
    };
    let index = inventory.device_index();
    // A claim's results on one GPU are one hold; a claim has at most 32 results (the API's
    // limit), so a linear look-up is cheapest. A claim past that limit (from a file, or not
    // from an API server) is looked up by hash, so 180,000 results cost no quadratic time.
    let mut on: Vec<(usize, Hold<'a>)> = Vec::new();
    let mut at: HashMap<usize, usize> = HashMap::default();
    let mut requests: HashSet<(usize, &'a str)> = HashSet::default();
    for claim in claims.iter().filter(|c| !c.results.is_empty()) {
        let many = claim.results.len() > MAX_RESULTS;
        for result in &claim.results {
            let key = (result.driver, result.pool, result.device);
            let Some(&gpu) = index.get(&key) else {
                continue;
            };
            let found = if many {
                at.get(&gpu).copied()
            } else {
                on.iter().position(|(g, _)| *g == gpu)
            };
            let hold = match found {
                Some(i) => &mut on[i].1,
                None => {
                    if many {
                        at.insert(gpu, on.len());
                    }
                    on.push((gpu, new_hold(claim)));
                    &mut on.last_mut().expect("just pushed").1
                }
            };
            if RenderDriver::named(&result.driver).is_some() {
                hold.render_node = true;
            } else {
                hold.media_device = true;
            }
            let request = result.request.as_str();
            let new = if many {
                requests.insert((gpu, request))
            } else {
                !hold.requests.contains(&request)
            };
            if new {
                hold.requests.push(request);
            }
        }
        at.clear();
        requests.clear();
        if on.is_empty() {
            holders.elsewhere += 1;
        }
        for (gpu, hold) in on.drain(..) {
            holders.per_gpu[gpu].push(hold);
        }
    }
    for holds in holders.per_gpu.iter_mut().filter(|h| h.len() > 1) {
        holds.sort_by(|a, b| (a.namespace, a.claim).cmp(&(b.namespace, b.claim)));
    }
    holders
}

fn new_hold(claim: &AllocatedClaim) -> Hold<'_> {
    let namespace = &claim.namespace;
    let pods = claim
        .reserved_for
        .iter()
        // A consumer is a pod when its resource is `pods` of the core group.
        .filter(|r| r.resource == "pods" && r.api_group.as_deref().unwrap_or("").is_empty())
        .map(|r| format!("{namespace}/{}", r.name))
        .collect();
    Hold {
        namespace,
        claim: &claim.name,
        requests: Vec::new(),
        render_node: false,
        media_device: false,
        pods,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalogue;
    use crate::fleet::inventory;
    use crate::fleet::objects::Objects;

    /// Two GPUs on one node: a liken render node and a media device each, joined by address.
    fn fleet() -> Inventory {
        let mut objects = Objects::wanting(crate::fleet::objects::Kinds::ALL);
        let device = |name: &str, address: &str, media: bool| {
            let mut attributes = serde_json::json!({
                "resource.kubernetes.io/pciBusID": {"string": address},
            });
            if media {
                attributes["vaDriver"] = serde_json::json!({"string": "iHD"});
                for c in catalogue::Capability::ALL {
                    attributes[c.attribute()] = serde_json::json!({"bool": true});
                }
            } else {
                attributes["renderNode"] = serde_json::json!({"string": "/dev/dri/renderD128"});
            }
            serde_json::json!({"name": name, "attributes": attributes})
        };
        let slice = |driver: &str, devices: Vec<serde_json::Value>| {
            serde_json::json!({
                "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                "metadata": {"name": format!("n1-{driver}")},
                "spec": {"driver": driver, "nodeName": "n1",
                         "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                         "devices": devices}
            })
        };
        for s in [
            slice(
                "liken.sh",
                vec![
                    device("card0", "0000:00:02.0", false),
                    device("card1", "0000:03:00.0", false),
                ],
            ),
            slice(
                catalogue::DRIVER,
                vec![
                    device("pci-0000-00-02-0", "0000:00:02.0", true),
                    device("pci-0000-03-00-0", "0000:03:00.0", true),
                ],
            ),
        ] {
            objects.add_json(&s.to_string()).unwrap();
        }
        inventory::build(objects.slices)
    }

    /// A claim as the reader keeps it from the JSON an API server sends.
    fn read(claim: serde_json::Value) -> AllocatedClaim {
        let mut objects = Objects::wanting(
            crate::fleet::objects::Kinds::only(&[crate::fleet::objects::Kind::ResourceClaim])
                .claims_as_allocations(),
        );
        objects.add_value(&claim);
        assert_eq!(objects.notes, Vec::<String>::new());
        objects.allocated.pop().expect("a claim")
    }

    fn claim(name: &str, results: &[(&str, &str, &str)], pods: &[&str]) -> AllocatedClaim {
        read(serde_json::json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "media"},
            "spec": {},
            "status": {
                "allocation": {"devices": {"results": results.iter().map(|(request, driver, device)| {
                    serde_json::json!({"request": request, "driver": driver, "pool": "n1", "device": device})
                }).collect::<Vec<_>>()}},
                "reservedFor": pods.iter().map(|p| serde_json::json!({"resource": "pods", "name": p, "uid": "u"})).collect::<Vec<_>>()
            }
        }))
    }

    #[test]
    fn claims_are_joined_to_their_gpu_through_either_device() {
        let inventory = fleet();
        assert_eq!(inventory.gpus.len(), 2);
        let claims = [
            claim(
                "film-gpu",
                &[
                    ("gpu", "liken.sh", "card0"),
                    ("decodes", catalogue::DRIVER, "pci-0000-00-02-0"),
                ],
                &["film"],
            ),
            claim("render-only", &[("gpu", "liken.sh", "card0")], &[]),
            claim(
                "statement-only",
                &[("decodes", catalogue::DRIVER, "pci-0000-03-00-0")],
                &["a", "b"],
            ),
            claim("other-driver", &[("x", "gpu.example.com", "card0")], &[]),
            // Not allocated: no status at all.
            read(serde_json::json!({
                "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {"name": "pending", "namespace": "media"}, "spec": {}
            })),
        ];
        let holders = holders(&inventory, &claims);
        let first = inventory
            .gpus
            .iter()
            .position(|g| g.address == "0000:00:02.0")
            .unwrap();
        let second = 1 - first;
        assert_eq!(holders.counts(first), (2, 1));
        assert_eq!(holders.counts(second), (0, 1));
        assert_eq!(holders.elsewhere, 1);
        assert_eq!(
            holders.per_gpu[first][0],
            Hold {
                namespace: "media",
                claim: "film-gpu",
                requests: vec!["gpu", "decodes"],
                render_node: true,
                media_device: true,
                pods: vec!["media/film".into()],
            }
        );
        assert_eq!(
            holders.per_gpu[second][0].pods,
            ["media/a".to_string(), "media/b".to_string()]
        );
    }
}

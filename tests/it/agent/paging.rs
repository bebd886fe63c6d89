//! The agent's listing of its own node's slice when the answers do not page as kube-apiserver
//! pages (the real server's pages rewritten by the fault proxy): one fault logged, a backoff
//! between listings instead of hundreds a second, `/readyz` saying so, and publishing once the
//! answers page again.

use super::*;
use crate::support::faultproxy::Paging;

/// The watcher's list of the node's slices (its watches ask no limit).
const LISTING: &str = "limit=500";

/// The lists of slices the proxy was asked for since `mark`.
fn listings(proxy: &FaultProxy, mark: usize) -> usize {
    proxy
        .answers_since(mark)
        .iter()
        .filter(|a| a.lists("resourceslices") && a.target.contains(LISTING))
        .count()
}

cp_test! {
fn a_listing_that_does_not_page_is_a_fault_backed_off_and_said() {
    for (node, paging, said) in [
        ("paging-same", Paging::SameToken, "page 2 handed back the continue token it was asked with"),
        ("paging-fresh", Paging::FreshObjects, "the listing went past 8 pages without an end"),
    ] {
        let s = setup(node, 1);
        let (proxy, kubeconfig) = s.proxy();
        proxy.fail_next(usize::MAX, Fault::Paging(paging), Some("GET"), Some(LISTING));
        let mark = proxy.mark();
        let mut agent = s.start_with_kubeconfig(&kubeconfig, &[]);
        let line = agent.log.wait_for(said, DEADLINE);
        assert!(
            line.contains(" WARN ")
                && line.contains("follow this node's ResourceSlice: list ResourceSlices")
                && line.contains("does not page as kube-apiserver pages"),
            "{line}"
        );
        let (_, ready) = agent.get("/readyz");
        assert!(ready.contains("warning: the listing GET "), "{ready}");
        // Backed off: a few listings in the next seconds, not hundreds a second.
        let since = proxy.mark();
        std::thread::sleep(Duration::from_secs(3));
        let again = listings(&proxy, since);
        assert!(again <= 3 * 8, "{again} listings' pages in 3 s");
        assert_eq!(agent.log.count(said), 1, "logged once: {:#?}", agent.log.lines());
        assert!(listings(&proxy, mark) > 0);

        // Paging as the server pages again: listed, published, and /readyz says no more.
        proxy.clear_faults();
        s.wait_slice("published once the answers page", |_| true);
        wait("the warning is gone", || !agent.get("/readyz").1.contains("does not page"));
        agent.terminate();
        agent.wait_exit(DEADLINE).expect("the agent stops");
    }
}
}

//! Tests of the test API server itself (tests/support/apiserver): every verb, error shape and
//! fault, over real HTTP, and with kubectl when it is installed.

mod support;

use support::apiserver::TestApiServer;

#[test]
fn starts() {
    let s = TestApiServer::start();
    assert!(s.base_url().starts_with("http://127.0.0.1:"));
}

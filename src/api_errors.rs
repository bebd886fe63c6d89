//! An API server's error answer, read as client-go reads it: not every answer is a `Status`
//! (kube-apiserver's 429s from its flow-control filters are plain text with `Retry-After`, a load
//! balancer answers with its own page), so what came instead becomes one, with `retryAfterSeconds`
//! from the header (rest/request.go `newUnstructuredResponseError`, `checkWait`). kube-rs reads
//! only the body: the plugin reads answers here in `crate::fleet::cluster`, the agent through
//! [`ErrorAnswers`] in front of kube-rs.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Either, Full};
use kube::core::{Status, response::StatusDetails};

use crate::text::{http_reason, one_line};

/// The longest part of an error body quoted in a message.
pub(crate) const MAX_ERROR_TEXT: usize = 400;

/// The most of an error answer's body that is read; a `Status` is far smaller, and what is
/// quoted of anything else is [`MAX_ERROR_TEXT`].
pub(crate) const MAX_ERROR_BODY: usize = 64 * 1024;

/// A failed request's answer as a `Status`: the one kube-apiserver sends (`"kind":"Status"`, as
/// client-go recognises it), or else one made of what was sent instead (a proxy's or a load
/// balancer's page, plain text, HTML, other JSON): that text on one line as the message, and the
/// HTTP reason phrase as the reason, spelt as kube-apiserver spells its reasons (`BadGateway`).
/// A `Retry-After` header the `Status` does not already carry becomes its `retryAfterSeconds`.
pub(crate) fn failure(code: StatusCode, headers: &HeaderMap, body: &str) -> Status {
    #[derive(serde::Deserialize)]
    struct Head {
        kind: Option<String>,
    }
    let sent = serde_json::from_str::<Head>(body)
        .is_ok_and(|k| k.kind.as_deref() == Some("Status"))
        .then(|| serde_json::from_str::<Status>(body).ok())
        .flatten();
    let mut status = sent.unwrap_or_else(|| {
        let reason = http_reason(code.as_u16());
        let text = one_line(body, MAX_ERROR_TEXT);
        let message = if text.is_empty() {
            "no message".to_owned()
        } else {
            text
        };
        Status::failure(&message, &reason)
    });
    if status.code == 0 {
        status.code = code.as_u16();
    }
    status.message = one_line(&status.message, MAX_ERROR_TEXT);
    if let Some(seconds) = retry_after(headers) {
        let details = status.details.get_or_insert_with(|| StatusDetails {
            name: String::new(),
            group: String::new(),
            kind: String::new(),
            uid: String::new(),
            causes: Vec::new(),
            retry_after_seconds: 0,
        });
        if details.retry_after_seconds == 0 {
            details.retry_after_seconds = seconds;
        }
    }
    status
}

/// A successful answer that is a `Status` of failure, as the error client-go makes of it
/// (rest/request.go `transformResponse`: a `Status` whose `status` is not `Success` is an error
/// whatever the HTTP code). Its code is the `Status`'s own where that is an error code, else 500,
/// so that kube-rs and our callers read it as one. `None` for any other answer, a `Status` of
/// success (a DELETE's) included. Only the top level's keys are read up to `kind`, so a List is
/// passed over at the cost of its first few bytes (kube-apiserver writes `kind` first).
pub(crate) fn failure_in_success(body: &[u8]) -> Option<Status> {
    use serde::de::{Deserializer as _, IgnoredAny, MapAccess, Visitor};
    use std::borrow::Cow;
    // Carries what `kind` says out of the visitor: serde_json fails a map left unfinished.
    struct KindOnly<'a>(&'a mut bool);
    impl<'de> Visitor<'de> for KindOnly<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                if key == "kind" {
                    let kind: Option<Cow<'de, str>> = map.next_value()?;
                    *self.0 = kind.as_deref() == Some("Status");
                    return Ok(());
                }
                map.next_value::<IgnoredAny>()?;
            }
            Ok(())
        }
    }
    // client-go's own reading: any `status` but `Success` is a failure (kube-rs's type knows
    // only `Success` and `Failure`, and would not read another).
    #[derive(serde::Deserialize)]
    struct Sent {
        #[serde(default)]
        status: String,
        #[serde(default)]
        message: String,
        #[serde(default)]
        reason: String,
        #[serde(default)]
        code: u16,
    }
    let mut is_status = false;
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let _ = deserializer.deserialize_map(KindOnly(&mut is_status));
    if !is_status {
        return None;
    }
    let sent: Sent = serde_json::from_slice(body).ok()?;
    if sent.status.is_empty() || sent.status == "Success" {
        return None;
    }
    let code = match StatusCode::from_u16(sent.code) {
        Ok(code) if code.is_client_error() || code.is_server_error() => code.as_u16(),
        _ => StatusCode::INTERNAL_SERVER_ERROR.as_u16(),
    };
    let reason = if sent.reason.is_empty() {
        http_reason(code)
    } else {
        one_line(&sent.reason, MAX_ERROR_TEXT)
    };
    let message = match one_line(&sent.message, MAX_ERROR_TEXT) {
        message if message.is_empty() => "no message".to_owned(),
        message => message,
    };
    Some(Status::failure(&message, &reason).with_code(code))
}

/// The `Retry-After` header in whole seconds, the only form client-go reads
/// (`retryAfterSeconds`: an HTTP date is ignored, as there).
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<u32> {
    headers
        .get(header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// How long to wait before sending a request again, when its answer asks for that: a 429 or a
/// 5xx with a `Retry-After` (client-go's `checkWait`; without the header it does not retry).
pub(crate) fn asked_wait(code: StatusCode, headers: &HeaderMap) -> Option<Duration> {
    if code == StatusCode::TOO_MANY_REQUESTS || code.is_server_error() {
        retry_after(headers).map(|s| Duration::from_secs(u64::from(s)))
    } else {
        None
    }
}

/// A layer for kube-rs's client stack: every error answer reaches kube-rs as a `Status` made by
/// [`failure`], so its error carries the HTTP code, the server's words on one line and the
/// `Retry-After`, whatever the body was. Other answers pass untouched, streams included.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ReadErrorAnswers;

impl<S> tower::Layer<S> for ReadErrorAnswers {
    type Service = ErrorAnswers<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ErrorAnswers { inner }
    }
}

/// The service [`ReadErrorAnswers`] makes.
#[derive(Clone, Debug)]
pub(crate) struct ErrorAnswers<S> {
    inner: S,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl<S, B, Q> tower::Service<Request<Q>> for ErrorAnswers<S>
where
    S: tower::Service<Request<Q>, Response = Response<B>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<Either<B, Full<Bytes>>>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<Q>) -> Self::Future {
        let answer = self.inner.call(request);
        Box::pin(async move {
            let response = answer.await.map_err(Into::into)?;
            let code = response.status();
            if !(code.is_client_error() || code.is_server_error()) {
                return Ok(response.map(Either::Left));
            }
            let (mut parts, mut body) = response.into_parts();
            let mut read = Vec::new();
            while read.len() < MAX_ERROR_BODY {
                match body.frame().await {
                    Some(frame) => {
                        if let Ok(data) = frame.map_err(Into::into)?.into_data() {
                            let room = MAX_ERROR_BODY - read.len();
                            read.extend_from_slice(&data[..data.len().min(room)]);
                        }
                    }
                    None => break,
                }
            }
            let status = failure(code, &parts.headers, &String::from_utf8_lossy(&read));
            let json = serde_json::to_vec(&status)?;
            parts.headers.remove(header::CONTENT_LENGTH);
            parts.headers.remove(header::CONTENT_ENCODING);
            parts.headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            Ok(Response::from_parts(
                parts,
                Either::Right(Full::new(Bytes::from(json))),
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::StatusCode;

    fn no_headers() -> HeaderMap {
        HeaderMap::new()
    }

    fn retry_after_header(value: &'static str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::RETRY_AFTER, HeaderValue::from_static(value));
        headers
    }

    #[test]
    fn a_failure_is_the_servers_status_or_made_of_what_was_sent() {
        let h = no_headers();
        // kube-apiserver's own Status, as it sent it.
        let sent = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"resourceslices is forbidden","reason":"Forbidden","code":403}"#;
        let status = failure(StatusCode::FORBIDDEN, &h, sent);
        assert_eq!(
            (status.code, status.reason.as_str(), status.message.as_str()),
            (403, "Forbidden", "resourceslices is forbidden")
        );
        // A proxy's plain text, an HTML page, JSON that is not a Status, nothing at all.
        let status = failure(StatusCode::BAD_GATEWAY, &h, "upstream connect error\n");
        assert_eq!(
            (status.code, status.reason.as_str(), status.message.as_str()),
            (502, "BadGateway", "upstream connect error")
        );
        let page = "<html>\r\n<head><title>503 Service Temporarily Unavailable</title></head>\r\n</html>\r\n";
        let status = failure(StatusCode::SERVICE_UNAVAILABLE, &h, page);
        assert_eq!(status.reason, "ServiceUnavailable");
        assert_eq!(
            status.message,
            "<html> <head><title>503 Service Temporarily Unavailable</title></head> </html>"
        );
        let status = failure(
            StatusCode::TOO_MANY_REQUESTS,
            &h,
            r#"{"error":"slow down"}"#,
        );
        assert_eq!(
            (status.code, status.reason.as_str(), status.message.as_str()),
            (429, "TooManyRequests", r#"{"error":"slow down"}"#)
        );
        assert_eq!(
            failure(StatusCode::BAD_GATEWAY, &h, "").message,
            "no message"
        );
        // Long text is cut; a Status's message on several lines becomes one.
        let status = failure(StatusCode::BAD_GATEWAY, &h, &"x".repeat(5000));
        assert_eq!(status.message.len(), MAX_ERROR_TEXT + 3);
        let sent = r#"{"kind":"Status","message":"admission webhook said:\nno","reason":"Invalid","code":422}"#;
        assert_eq!(
            failure(StatusCode::UNPROCESSABLE_ENTITY, &h, sent).message,
            "admission webhook said: no"
        );
        // A code the server left out is the HTTP one.
        let sent = r#"{"kind":"Status","message":"gone","reason":"Gone"}"#;
        assert_eq!(failure(StatusCode::GONE, &h, sent).code, 410);
    }

    #[test]
    fn a_success_that_is_a_status_of_failure_is_an_error_as_in_client_go() {
        let failed = |body: &str| failure_in_success(body.as_bytes());
        let status = failed(
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"etcd\nis down","reason":"InternalError","code":500}"#,
        )
        .unwrap();
        assert_eq!(
            (status.code, status.reason.as_str(), status.message.as_str()),
            (500, "InternalError", "etcd is down")
        );
        // Its own code where it is an error code, else 500; any status but Success fails.
        let status =
            failed(r#"{"status":"Failure","code":403,"kind":"Status","reason":"Forbidden"}"#)
                .unwrap();
        assert_eq!((status.code, status.reason.as_str()), (403, "Forbidden"));
        let status = failed(r#"{"kind":"Status","status":"Broken","code":200}"#).unwrap();
        assert_eq!(
            (status.code, status.reason.as_str(), status.message.as_str()),
            (500, "InternalError", "no message")
        );
        // A DELETE's Status of success, a Status without one, Lists and objects pass.
        for body in [
            r#"{"kind":"Status","status":"Success","code":200}"#,
            r#"{"kind":"Status","code":200}"#,
            r#"{"kind":"ResourceSliceList","metadata":{},"items":[{"kind":"Status","status":"Failure"}]}"#,
            r#"{"items":[],"kind":"NodeList","status":"Failure"}"#,
            "not json",
            "",
            "[]",
        ] {
            assert!(failed(body).is_none(), "{body}");
        }
    }

    #[test]
    fn retry_after_is_read_in_whole_seconds_as_client_go_reads_it() {
        // What priority and fairness answers: plain text and the header, no Status.
        let status = failure(
            StatusCode::TOO_MANY_REQUESTS,
            &retry_after_header("3"),
            "Too many requests, please try again later.\n",
        );
        assert_eq!(
            (status.code, status.reason.as_str(), status.message.as_str()),
            (
                429,
                "TooManyRequests",
                "Too many requests, please try again later."
            )
        );
        assert_eq!(status.details.map(|d| d.retry_after_seconds), Some(3));
        // A Status's own retryAfterSeconds wins over the header.
        let sent = r#"{"kind":"Status","reason":"ServerTimeout","code":504,"details":{"retryAfterSeconds":7}}"#;
        let status = failure(StatusCode::GATEWAY_TIMEOUT, &retry_after_header("1"), sent);
        assert_eq!(status.details.map(|d| d.retry_after_seconds), Some(7));
        // An HTTP date, or nonsense, is no number of seconds.
        for value in ["Wed, 21 Oct 2026 07:28:00 GMT", "soon", "-1", ""] {
            assert_eq!(retry_after(&retry_after_header(value)), None, "{value:?}");
        }
        assert_eq!(retry_after(&retry_after_header(" 2 ")), Some(2));
        // Only a 429 or a 5xx with the header is worth the wait (client-go's checkWait).
        let asked = retry_after_header("2");
        assert_eq!(
            asked_wait(StatusCode::TOO_MANY_REQUESTS, &asked),
            Some(Duration::from_secs(2))
        );
        assert_eq!(
            asked_wait(StatusCode::SERVICE_UNAVAILABLE, &asked),
            Some(Duration::from_secs(2))
        );
        assert_eq!(asked_wait(StatusCode::FORBIDDEN, &asked), None);
        assert_eq!(
            asked_wait(StatusCode::TOO_MANY_REQUESTS, &no_headers()),
            None
        );
    }

    #[tokio::test]
    async fn the_layer_hands_kube_rs_a_status_for_any_error_answer() {
        use tower::{Layer, ServiceExt};

        async fn through(response: Response<Full<Bytes>>) -> (StatusCode, HeaderMap, Bytes) {
            let service = tower::service_fn(move |_: Request<()>| {
                let response = response.clone();
                async move { Ok::<_, std::convert::Infallible>(response) }
            });
            let answer = ReadErrorAnswers
                .layer(service)
                .oneshot(Request::new(()))
                .await
                .unwrap();
            let (parts, body) = answer.into_parts();
            let bytes = body.collect().await.unwrap().to_bytes();
            (parts.status, parts.headers, bytes)
        }

        let mut throttled = Response::new(Full::new(Bytes::from_static(
            b"Too many requests, please try again later.\n",
        )));
        *throttled.status_mut() = StatusCode::TOO_MANY_REQUESTS;
        throttled
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("4"));
        throttled
            .headers_mut()
            .insert(header::CONTENT_LENGTH, HeaderValue::from_static("44"));
        let (code, headers, body) = through(throttled).await;
        assert_eq!(code, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(headers[header::CONTENT_TYPE], "application/json");
        assert!(headers.get(header::CONTENT_LENGTH).is_none());
        let status: Status = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            (status.code, status.reason.as_str()),
            (429, "TooManyRequests")
        );
        assert_eq!(status.details.map(|d| d.retry_after_seconds), Some(4));

        // JSON that is not a Status (kube-rs would take it for one, with code 0).
        let mut other = Response::new(Full::new(Bytes::from_static(br#"{"error":"nope"}"#)));
        *other.status_mut() = StatusCode::BAD_GATEWAY;
        let status: Status = serde_json::from_slice(&through(other).await.2).unwrap();
        assert_eq!(
            (status.code, status.reason.as_str(), status.message.as_str()),
            (502, "BadGateway", r#"{"error":"nope"}"#)
        );

        // A success passes as it came.
        let ok = Response::new(Full::new(Bytes::from_static(b"{\"kind\":\"Node\"}")));
        assert_eq!(
            through(ok).await.2,
            Bytes::from_static(b"{\"kind\":\"Node\"}")
        );
    }
}

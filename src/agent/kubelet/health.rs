//! The device health service (`DRAResourceHealth`, v1 and v1alpha1) on the DRA socket: the
//! kubelet opens `NodeWatchResources` once it has registered the plugin (1.34–1.35 with the gate
//! `ResourceHealthStatus` on, whatever the plugin advertises; 1.36 on by default; 1.37 only when
//! the registration lists the service, v1 preferred) and shows each device's health in
//! `status.containerStatuses[].allocatedResourcesStatus` of the pods that hold it.
//!
//! A device's health is its last *published* probe: the publisher sends a [`Published`] after
//! each write (or check) that made the stored slice say it, so the kubelet never says "healthy"
//! of a GPU the slice calls failed, or the reverse. Every stream gets the whole list at once, again
//! at each change, and again every [`RESEND`]: the kubelet counts a device it has not heard about
//! for 30 s (`healthTimeout`, `DefaultHealthTimeout`) as Unknown, from when it received it.

use std::pin::Pin;
use std::time::{Duration, SystemTime};

use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};
use tracing::debug;

use super::proto::health::{v1, v1alpha1};

/// How long the kubelet keeps a device's health without hearing it again: its default
/// (1.34 `healthTimeout`, 1.37 `DefaultHealthTimeout`), also sent in v1's
/// `health_check_timeout_seconds` so that the two agree by construction.
pub const KUBELET_HEALTH_TIMEOUT: Duration = Duration::from_secs(30);

/// How often every device is sent again on an open stream: a third of the kubelet's timeout, so
/// that one late or lost message never turns a device Unknown.
pub const RESEND: Duration = Duration::from_secs(10);

/// The longest `message` sent, in bytes: the kubelet cuts a message at 1024 characters.
pub const MAX_MESSAGE: usize = 1000;

/// The services' names as the registration lists them (`<package>.<service>`), preferred first.
pub const HEALTH_SERVICES: [&str; 2] = ["v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth"];

/// What the slice last said about the node's devices, as the publisher stored it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Published {
    /// The pool (the node's name).
    pub pool: String,
    /// Every device of the slice.
    pub devices: Vec<DeviceHealth>,
}

/// One device's published state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceHealth {
    /// The device's name in the pool.
    pub name: String,
    /// Why its probe failed, word for word; `None` when it works.
    pub failure: Option<String>,
    /// When this health was first published (it is the same at every probe since).
    pub since: SystemTime,
}

impl Published {
    /// The published state for `devices` (name, failure), keeping the `since` of each device
    /// whose health is the same in `before`; new or changed ones get `now`.
    pub fn follow<'a>(
        before: Option<&Published>,
        pool: &str,
        devices: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
        now: SystemTime,
    ) -> Published {
        let devices = devices
            .into_iter()
            .map(|(name, failure)| {
                let kept = before
                    .and_then(|b| b.devices.iter().find(|d| d.name == name))
                    .filter(|d| d.failure.as_deref() == failure)
                    .map(|d| d.since);
                DeviceHealth {
                    name: name.to_owned(),
                    failure: failure.map(str::to_owned),
                    since: kept.unwrap_or(now),
                }
            })
            .collect();
        Published {
            pool: pool.to_owned(),
            devices,
        }
    }
}

/// The publisher's end: the stored slice's devices, `None` until the first publish.
pub type HealthSender = watch::Sender<Option<Published>>;

/// The services' end.
pub type HealthFeed = watch::Receiver<Option<Published>>;

/// Unix seconds of `time` (0 before 1970, which no clock here shows).
fn unix_seconds(time: SystemTime) -> i64 {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Serves both versions from the publisher's feed; `resend` is [`RESEND`] but for tests.
#[derive(Clone, Debug)]
pub(super) struct HealthService {
    feed: HealthFeed,
    resend: Duration,
}

impl HealthService {
    pub(super) fn new(feed: HealthFeed, resend: Duration) -> Self {
        Self { feed, resend }
    }

    /// Starts one stream: a task that sends `message(published)` now, at each change and every
    /// resend period, until the kubelet closes the stream or the publisher is gone.
    fn stream<M: Send + 'static>(
        &self,
        api: &'static str,
        message: fn(&Published) -> M,
    ) -> ReceiverStream<Result<M, Status>> {
        // Two messages in flight at most: a kubelet that stops reading holds one task and two
        // messages, not a growing queue.
        let (tx, rx) = mpsc::channel(2);
        let mut feed = self.feed.clone();
        let resend = self.resend;
        tokio::spawn(async move {
            debug!(api, "the kubelet opened a device health stream");
            loop {
                let current = feed.borrow_and_update().as_ref().map(message);
                if let Some(current) = current {
                    let sent = tokio::select! {
                        sent = tx.send(Ok(current)) => sent.is_ok(),
                        () = tx.closed() => false,
                    };
                    if !sent {
                        break;
                    }
                }
                tokio::select! {
                    changed = feed.changed() => if changed.is_err() { break },
                    () = tokio::time::sleep(resend) => {}
                    () = tx.closed() => break,
                }
            }
            debug!(api, "a device health stream ended");
        });
        ReceiverStream::new(rx)
    }
}

/// The v1 message: every device, with the failure as the message (one line, bounded).
fn v1_message(published: &Published) -> v1::NodeWatchResourcesResponse {
    let timeout = i64::try_from(KUBELET_HEALTH_TIMEOUT.as_secs()).unwrap_or(0);
    v1::NodeWatchResourcesResponse {
        devices: published
            .devices
            .iter()
            .map(|d| v1::DeviceHealth {
                device: Some(v1::DeviceIdentifier {
                    pool_name: published.pool.clone(),
                    device_name: d.name.clone(),
                }),
                health: health_v1(d).into(),
                last_updated_time: unix_seconds(d.since),
                health_check_timeout_seconds: timeout,
                message: d.failure.as_deref().map(message_text).unwrap_or_default(),
            })
            .collect(),
    }
}

/// The v1alpha1 message: every device, without the fields v1alpha1 lacks.
fn v1alpha1_message(published: &Published) -> v1alpha1::NodeWatchResourcesResponse {
    v1alpha1::NodeWatchResourcesResponse {
        devices: published
            .devices
            .iter()
            .map(|d| v1alpha1::DeviceHealth {
                device: Some(v1alpha1::DeviceIdentifier {
                    pool_name: published.pool.clone(),
                    device_name: d.name.clone(),
                }),
                health: if d.failure.is_some() {
                    v1alpha1::HealthStatus::Unhealthy
                } else {
                    v1alpha1::HealthStatus::Healthy
                }
                .into(),
                last_updated_time: unix_seconds(d.since),
            })
            .collect(),
    }
}

fn health_v1(device: &DeviceHealth) -> v1::HealthStatus {
    if device.failure.is_some() {
        v1::HealthStatus::Unhealthy
    } else {
        v1::HealthStatus::Healthy
    }
}

/// A probe's failure as the pod's status shows it: `probe failed: ` and the failure on one line,
/// control characters escaped (a driver's words reach `kubectl describe`), at most
/// [`MAX_MESSAGE`] bytes.
pub(crate) fn message_text(failure: &str) -> String {
    let escaped = crate::text::terminal_safe(failure);
    crate::text::one_line(&format!("probe failed: {escaped}"), MAX_MESSAGE)
}

type Stream<M> = Pin<Box<dyn tokio_stream::Stream<Item = Result<M, Status>> + Send>>;

#[tonic::async_trait]
impl v1::dra_resource_health_server::DraResourceHealth for HealthService {
    type NodeWatchResourcesStream = Stream<v1::NodeWatchResourcesResponse>;

    async fn node_watch_resources(
        &self,
        _request: Request<v1::NodeWatchResourcesRequest>,
    ) -> Result<Response<Self::NodeWatchResourcesStream>, Status> {
        Ok(Response::new(Box::pin(self.stream("v1", v1_message))))
    }
}

#[tonic::async_trait]
impl v1alpha1::dra_resource_health_server::DraResourceHealth for HealthService {
    type NodeWatchResourcesStream = Stream<v1alpha1::NodeWatchResourcesResponse>;

    async fn node_watch_resources(
        &self,
        _request: Request<v1alpha1::NodeWatchResourcesRequest>,
    ) -> Result<Response<Self::NodeWatchResourcesStream>, Status> {
        Ok(Response::new(Box::pin(
            self.stream("v1alpha1", v1alpha1_message),
        )))
    }
}

#[cfg(test)]
mod tests {
    use tokio_stream::StreamExt;

    use super::*;

    fn at(seconds: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(seconds)
    }

    fn published(
        devices: &[(&str, Option<&str>)],
        now: u64,
        before: Option<&Published>,
    ) -> Published {
        Published::follow(before, "node-a", devices.iter().copied(), at(now))
    }

    #[test]
    fn a_device_keeps_its_time_while_its_health_stays() {
        let first = published(&[("gpu0", None), ("gpu1", None)], 100, None);
        let second = published(&[("gpu0", None), ("gpu1", Some("hung"))], 200, Some(&first));
        assert_eq!(second.devices[0].since, at(100));
        assert_eq!(second.devices[1].since, at(200));
        let third = published(&[("gpu1", Some("hung"))], 300, Some(&second));
        assert_eq!(third.devices[0].since, at(200));
    }

    #[test]
    fn v1_says_why_on_one_bounded_line_and_v1alpha1_says_the_health() {
        let long = format!("vaInitialize failed\n\x1b[31m{}", "x".repeat(5000));
        let state = published(&[("gpu0", None), ("gpu1", Some(&long))], 100, None);
        let message = v1_message(&state);
        assert_eq!(message.devices.len(), 2);
        let ok = &message.devices[0];
        assert_eq!(ok.health(), v1::HealthStatus::Healthy);
        assert_eq!(ok.message, "");
        assert_eq!(ok.health_check_timeout_seconds, 30);
        assert_eq!(ok.last_updated_time, 100);
        let device = ok.device.as_ref().unwrap();
        assert_eq!(
            (&*device.pool_name, &*device.device_name),
            ("node-a", "gpu0")
        );
        let failed = &message.devices[1];
        assert_eq!(failed.health(), v1::HealthStatus::Unhealthy);
        assert!(
            failed
                .message
                .starts_with("probe failed: vaInitialize failed\\n\\x1b[31mxxx"),
            "{}",
            failed.message
        );
        assert!(
            failed.message.len() <= MAX_MESSAGE + 3,
            "{}",
            failed.message.len()
        );
        assert!(!failed.message.chars().any(char::is_control));

        let alpha = v1alpha1_message(&state);
        assert_eq!(alpha.devices[0].health(), v1alpha1::HealthStatus::Healthy);
        assert_eq!(alpha.devices[1].health(), v1alpha1::HealthStatus::Unhealthy);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_sends_at_once_at_each_change_and_every_period() {
        let (tx, rx) = watch::channel(None);
        let service = HealthService::new(rx, RESEND);
        let mut stream = service.stream("v1", v1_message);
        // Nothing published yet: nothing to say.
        let nothing = tokio::time::timeout(RESEND * 2, stream.next()).await;
        assert!(nothing.is_err(), "{nothing:?}");

        tx.send_replace(Some(published(&[("gpu0", None)], 1, None)));
        let first = stream.next().await.unwrap().unwrap();
        assert_eq!(first.devices[0].health(), v1::HealthStatus::Healthy);

        let before = tokio::time::Instant::now();
        let again = stream.next().await.unwrap().unwrap();
        assert_eq!(again, first);
        assert_eq!(before.elapsed(), RESEND, "sent again after the period");

        let before = tokio::time::Instant::now();
        tx.send_replace(Some(published(&[("gpu0", Some("hung"))], 2, None)));
        let changed = stream.next().await.unwrap().unwrap();
        assert_eq!(changed.devices[0].health(), v1::HealthStatus::Unhealthy);
        assert!(before.elapsed() < Duration::from_millis(1), "at once");

        // The publisher gone: the stream ends.
        drop(tx);
        assert!(stream.next().await.is_none());
    }
}

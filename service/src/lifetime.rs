//! How long a service process lives: until SIGINT or SIGTERM, until a
//! client asks it to stop (`moonkale-service stop`), or, for a service
//! started on the user's behalf (by the shim, `acp`, `claude`, `agent`),
//! until nothing has gone on in it for an idle period.
//!
//! What goes on is counted in holds ([`Activity::busy`]): every client
//! connection (an editor or front end on the socket, TCP or the remote
//! front door, a Claude Code IDE connection, a sandbox link), every
//! running agent turn and every live terminal holds one while it lasts.
//! The warm spare and idle sessions hold none: they are the service's own
//! business, not the user's.
//!
//! **Invariant:** [`Activity::idle_for`] returns only once no hold has
//! existed, and none has come and gone, for the whole period.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use tokio::sync::watch;

/// How long a service started on the user's behalf stays with nothing
/// going on: 10 minutes, `MOONKALE_AUTOSTART_IDLE_MS`.
pub fn autostart_idle() -> Duration {
    std::env::var("MOONKALE_AUTOSTART_IDLE_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(Duration::from_secs(600), Duration::from_millis)
}

/// A count of what goes on, with a change counter so that a hold that
/// came and went is seen too.
#[derive(Clone)]
pub struct Activity {
    holds: Arc<watch::Sender<usize>>,
    stop: Arc<watch::Sender<bool>>,
}

/// One hold on an [`Activity`]; released when dropped.
pub struct Busy {
    holds: Arc<watch::Sender<usize>>,
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.holds.send_modify(|n| *n -= 1);
    }
}

impl Default for Activity {
    fn default() -> Activity {
        Activity::new()
    }
}

impl Activity {
    pub fn new() -> Activity {
        Activity {
            holds: Arc::new(watch::channel(0).0),
            stop: Arc::new(watch::channel(false).0),
        }
    }

    /// The process's own: what its connections, turns and terminals hold.
    pub fn process() -> &'static Activity {
        static PROCESS: LazyLock<Activity> = LazyLock::new(Activity::new);
        &PROCESS
    }

    /// A hold until the returned guard is dropped.
    pub fn busy(&self) -> Busy {
        self.holds.send_modify(|n| *n += 1);
        Busy {
            holds: self.holds.clone(),
        }
    }

    /// How many holds exist now.
    pub fn holds(&self) -> usize {
        *self.holds.borrow()
    }

    /// Returns once there has been no hold for `period` on end.
    pub async fn idle_for(&self, period: Duration) {
        let mut holds = self.holds.subscribe();
        loop {
            // The sender lives in `self`, so the channel cannot close.
            let _ = holds.wait_for(|n| *n == 0).await;
            tokio::select! {
                // A hold taken (even one already given back) starts the
                // period again, even one seen as the period runs out.
                biased;
                _ = holds.changed() => {}
                () = tokio::time::sleep(period) => return,
            }
        }
    }

    /// Asks the process to stop ([`Activity::stop_requested`]).
    pub fn request_stop(&self) {
        self.stop.send_replace(true);
    }

    /// Returns once a stop was asked for.
    pub async fn stop_requested(&self) {
        let mut stop = self.stop.subscribe();
        let _ = stop.wait_for(|asked| *asked).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Polls `f` once: whether it is done.
    async fn done(f: &mut std::pin::Pin<Box<impl Future<Output = ()>>>) -> bool {
        tokio::time::timeout(Duration::ZERO, f.as_mut())
            .await
            .is_ok()
    }

    #[tokio::test(start_paused = true)]
    async fn idle_only_after_a_whole_period_without_holds() {
        let activity = Activity::new();
        let period = Duration::from_secs(600);
        let busy = activity.busy();
        let mut idle = Box::pin(activity.idle_for(period));
        tokio::time::advance(period * 2).await;
        assert!(!done(&mut idle).await, "idle while held");
        drop(busy);
        assert!(!done(&mut idle).await);
        tokio::time::advance(period - Duration::from_secs(1)).await;
        assert!(!done(&mut idle).await, "idle before the period ran out");
        // A hold that comes and goes (a `status`) starts the period again.
        drop(activity.busy());
        assert!(!done(&mut idle).await, "a brief hold did not count");
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(!done(&mut idle).await, "a brief hold did not count");
        tokio::time::advance(period).await;
        assert!(done(&mut idle).await, "not idle after a whole period");
    }

    #[tokio::test]
    async fn a_stop_request_is_heard_even_if_asked_before_waiting() {
        let activity = Activity::new();
        activity.request_stop();
        tokio::time::timeout(Duration::from_secs(5), activity.stop_requested())
            .await
            .expect("the stop request");
    }
}

//! Connections kept without a call: the idle monitor that closes expired ones on time, and
//! the warmers behind [`Pool::keep_warm`](super::Pool::keep_warm) that keep an origin's
//! capacity up.

use std::sync::{Arc, Weak};
use std::time::Duration;

use fastfallback_pool::PoolKey;
use fastfallback_route::Address;

use super::{Origin, OriginInner, Shared};
use fastfallback_net::link::now;

impl Shared {
    /// Starts the idle monitor if a runtime is there; returns whether it runs.
    /// [`Pool::keep_warm`](super::Pool::keep_warm) for `origin` (this pool's own).
    pub(super) fn keep_warm(self: &Arc<Self>, origin: Origin, min_concurrent_calls: usize) {
        let key = origin.inner.key.clone();
        let mut st = self.lock();
        if let Some(old) = st.warmers.remove(&key) {
            old.abort();
        }
        if min_concurrent_calls == 0 || tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        let warmer = Warmer {
            pool: Arc::downgrade(self),
            address: origin.inner.address.clone(),
            key: key.clone(),
            min: min_concurrent_calls as u64,
            wake: Arc::clone(&self.warm),
        };
        drop(origin);
        let task = tokio::spawn(warmer.run());
        st.warmers.insert(key, task.abort_handle());
    }

    pub(super) fn start_monitor(self: &Arc<Self>) -> bool {
        if tokio::runtime::Handle::try_current().is_err() {
            return false;
        }
        let weak = Arc::downgrade(self);
        let wake = Arc::clone(&self.monitor);
        tokio::spawn(idle_monitor(weak, wake));
        true
    }
}

/// How often a warmer looks again without being woken.
const WARM_RECHECK: Duration = Duration::from_secs(1);

/// The task behind [`Pool::keep_warm`] for one origin. It holds the pool weakly: a dropped
/// pool stops it.
struct Warmer {
    pool: Weak<Shared>,
    address: Address,
    key: PoolKey,
    min: u64,
    wake: Arc<tokio::sync::Notify>,
}

impl Warmer {
    async fn run(self) {
        let mut failures = 0u32;
        // Jitter from the key's hash: spread, and repeatable per origin.
        let mut rng = {
            use std::hash::BuildHasher;
            fastfallback_proto::FxBuildHasher::default().hash_one(&self.key) | 1
        };
        loop {
            let Some(shared) = self.pool.upgrade() else {
                return;
            };
            let short = shared.lock().pool.capacity(&self.key) < self.min;
            if short {
                let origin = Origin {
                    inner: Arc::new(OriginInner::new(
                        Arc::clone(&shared),
                        self.address.clone(),
                        self.key.clone(),
                    )),
                };
                let opened = shared.open_idle(&origin).await;
                let (base, max) = (shared.options.warm_backoff, shared.options.warm_backoff_max);
                drop((origin, shared));
                match opened {
                    Ok(()) => failures = 0,
                    Err(e) => {
                        failures = failures.saturating_add(1);
                        let wait = backoff(base, max, failures, &mut rng);
                        tracing::debug!(origin = %self.address, error = %e, ?wait, "warm-up failed");
                        tokio::time::sleep(wait).await;
                    }
                }
                continue;
            }
            drop(shared);
            let _ = tokio::time::timeout(WARM_RECHECK, self.wake.notified()).await;
        }
    }
}

/// The wait after the `failures`-th failure in a row: `base` doubled per further failure,
/// at most `max`, times a jitter in [0.8, 1.2).
fn backoff(base: Duration, max: Duration, failures: u32, rng: &mut u64) -> Duration {
    let doubled = base.saturating_mul(1u32 << failures.saturating_sub(1).min(20));
    let wait = doubled.min(max);
    // xorshift64
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
    let unit = (*rng >> 11) as f64 / (1u64 << 53) as f64;
    wait.mul_f64(0.8 + 0.4 * unit)
}

/// Apache HttpClient's idle connection monitor: closes connections whose keep-alive ran out
/// (and idle ones beyond the limit) at the time cleanup says, without waiting for a call.
async fn idle_monitor(pool: Weak<Shared>, wake: Arc<tokio::sync::Notify>) {
    loop {
        let next = {
            let Some(shared) = pool.upgrade() else {
                return;
            };
            let mut st = shared.lock();
            let t = now();
            st.clock = t;
            let c = st.pool.cleanup(t);
            for closed in c.closed {
                st.close(closed);
            }
            if c.next_run.is_none() {
                st.monitor_running = false;
                return;
            }
            c.next_run
        };
        match next {
            Some(Duration::ZERO) => {}
            Some(d) => {
                let _ = tokio::time::timeout(d, wake.notified()).await;
            }
            None => return,
        }
    }
}

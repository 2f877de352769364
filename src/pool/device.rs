//! [`DevicePool`]: runtimes, one per device, lent one at a time with RAII guards.

use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll, Waker};
use std::sync::Arc;
use std::time::Instant;

use gyre_core::{Error, Result};
use parking_lot::{Condvar, Mutex};

use crate::Runtime;

struct Free {
    /// Indices of the runtimes not lent out, most recently returned last.
    idle: Vec<usize>,
    /// Tasks waiting for one (woken, all, by each return).
    wakers: Vec<Waker>,
}

struct Inner {
    runtimes: Vec<Runtime>,
    free: Mutex<Free>,
    /// Threads waiting in `acquire_blocking` / `acquire_timeout`.
    returned: Condvar,
}

/// A set of devices, each a [`Runtime`] (say one per GPU, or per OpenCL device), lent
/// one at a time: [`DevicePool::acquire`] waits for a free one and returns a
/// [`DeviceGuard`] that gives it back when dropped. A job that holds a guard has its
/// device to itself among the pool's users: it launches its kernels there and shuts them
/// down before it lets go (the guard does not own them; kernels still running when it
/// drops keep running on a device that is lent again).
///
/// # Examples
///
/// ```
/// use gyre::{Backend, KernelSpec, Runtime, pool::DevicePool};
/// let rt = || Runtime::builder().backend(Backend::Cpu).build();
/// let devices = DevicePool::new(vec![rt()?, rt()?])?;
/// let a = devices.try_acquire().expect("a free device");
/// let b = devices.try_acquire().expect("the other one");
/// assert!(devices.try_acquire().is_none()); // both lent out
/// let k = a.launch(KernelSpec::from_fn("inc", |x: u32| x + 1))?;
/// assert_eq!(k.call_blocking(1)?, 2);
/// k.shutdown_blocking()?;
/// drop(a); // back to the pool
/// assert_eq!(devices.available(), 1);
/// # drop(b);
/// # Ok::<(), gyre::Error>(())
/// ```
#[derive(Clone)]
pub struct DevicePool {
    inner: Arc<Inner>,
}

impl core::fmt::Debug for DevicePool {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DevicePool")
            .field("devices", &self.len())
            .field("available", &self.available())
            .finish()
    }
}

impl DevicePool {
    /// A pool of `runtimes`, all free.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty list.
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(gyre::pool::DevicePool::new(Vec::new()).is_err());
    /// ```
    pub fn new(runtimes: Vec<Runtime>) -> Result<Self> {
        if runtimes.is_empty() {
            return Err(Error::InvalidArgument {
                name: "device pool",
                value: "no runtime".into(),
                reason: "a device pool needs at least one device",
            });
        }
        let idle = (0..runtimes.len()).rev().collect();
        Ok(Self {
            inner: Arc::new(Inner {
                runtimes,
                free: Mutex::new(Free {
                    idle,
                    wakers: Vec::new(),
                }),
                returned: Condvar::new(),
            }),
        })
    }

    /// Devices in the pool.
    pub fn len(&self) -> usize {
        self.inner.runtimes.len()
    }

    /// Whether the pool has no device (never: `new` refuses that).
    pub fn is_empty(&self) -> bool {
        self.inner.runtimes.is_empty()
    }

    /// Devices not lent out now.
    pub fn available(&self) -> usize {
        self.inner.free.lock().idle.len()
    }

    fn take(&self, free: &mut Free) -> Option<DeviceGuard> {
        free.idle.pop().map(|index| DeviceGuard {
            inner: self.inner.clone(),
            index,
        })
    }

    /// A free device now, or `None`.
    pub fn try_acquire(&self) -> Option<DeviceGuard> {
        self.take(&mut self.inner.free.lock())
    }

    /// A free device, waiting on this thread until one is returned.
    pub fn acquire_blocking(&self) -> DeviceGuard {
        let mut free = self.inner.free.lock();
        loop {
            if let Some(g) = self.take(&mut free) {
                return g;
            }
            self.inner.returned.wait(&mut free);
        }
    }

    /// A free device, waiting on this thread until `deadline` at the latest.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] when none was returned in time.
    pub fn acquire_until(&self, deadline: Instant) -> Result<DeviceGuard> {
        let started = Instant::now();
        let mut free = self.inner.free.lock();
        loop {
            if let Some(g) = self.take(&mut free) {
                return Ok(g);
            }
            if self
                .inner
                .returned
                .wait_until(&mut free, deadline)
                .timed_out()
            {
                return self.take(&mut free).ok_or(Error::Timeout {
                    op: "device pool acquire",
                    after: deadline.saturating_duration_since(started),
                });
            }
        }
    }

    /// A free device, waiting (without blocking the thread) until one is returned.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped future holds no device.
    ///
    /// # Examples
    ///
    /// ```
    /// # async fn example() -> Result<(), gyre::Error> {
    /// let devices = gyre::pool::DevicePool::new(vec![gyre::Runtime::builder().backend(gyre::Backend::Cpu).build()?])?;
    /// let g = devices.acquire().await;
    /// assert_eq!(g.index(), 0);
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(example()).unwrap();
    /// ```
    pub fn acquire(&self) -> AcquireDevice {
        AcquireDevice { pool: self.clone() }
    }
}

/// The future of [`DevicePool::acquire`].
///
/// # Cancel safety
///
/// Cancel safe: it takes a device only in the poll that returns it.
#[must_use = "futures do nothing unless polled"]
#[derive(Debug)]
pub struct AcquireDevice {
    pool: DevicePool,
}

impl Future for AcquireDevice {
    type Output = DeviceGuard;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<DeviceGuard> {
        let pool = &self.pool;
        let mut free = pool.inner.free.lock();
        match pool.take(&mut free) {
            Some(g) => Poll::Ready(g),
            None => {
                // Under the lock the returns take: no return slips between the check and
                // the registration.
                if !free.wakers.iter().any(|w| w.will_wake(cx.waker())) {
                    free.wakers.push(cx.waker().clone());
                }
                Poll::Pending
            }
        }
    }
}

/// A device lent by a [`DevicePool`]: its [`Runtime`] (through `Deref`) until dropped.
pub struct DeviceGuard {
    inner: Arc<Inner>,
    index: usize,
}

impl DeviceGuard {
    /// The device's index in the pool (the order given to [`DevicePool::new`]).
    pub fn index(&self) -> usize {
        self.index
    }
}

impl core::fmt::Debug for DeviceGuard {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DeviceGuard")
            .field("index", &self.index)
            .field("backend", &self.inner.runtimes[self.index].backend())
            .finish()
    }
}

impl core::ops::Deref for DeviceGuard {
    type Target = Runtime;
    fn deref(&self) -> &Runtime {
        &self.inner.runtimes[self.index]
    }
}

impl Drop for DeviceGuard {
    fn drop(&mut self) {
        let wakers = {
            let mut free = self.inner.free.lock();
            free.idle.push(self.index);
            self.inner.returned.notify_one();
            std::mem::take(&mut free.wakers)
        };
        for w in wakers {
            w.wake();
        }
    }
}

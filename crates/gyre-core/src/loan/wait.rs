//! Waiting for a block: the tasks ([`LoanArena::poll_loan`]) and threads
//! ([`LoanArena::loan_blocking`]) a pool wakes when a block returns. A waiter registers,
//! then looks again, and a return looks at the waiter count after it freed its block (a
//! Dekker pair), so no wake-up is lost; loom checks it (`tests/loom_loans.rs`).

#[cfg(not(gyre_loom))]
use core::sync::atomic::AtomicUsize;
use core::sync::atomic::Ordering::Relaxed;
use core::task::{Context, Poll, Waker};
#[cfg(gyre_loom)]
use loom::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Instant;

use super::{Loan, LoanArena};
#[cfg(doc)]
use crate::Error;
use crate::Result;

#[cfg(not(gyre_loom))]
pub(super) use parking_lot::Mutex;

/// loom's mutex with parking_lot's `lock` (no poisoning), so the model checks this code.
#[cfg(gyre_loom)]
pub(super) struct Mutex<T>(loom::sync::Mutex<T>);

#[cfg(gyre_loom)]
impl<T: Default> Default for Mutex<T> {
    fn default() -> Self {
        Self::new(T::default())
    }
}

#[cfg(gyre_loom)]
impl<T> Mutex<T> {
    pub(super) fn new(v: T) -> Self {
        Self(loom::sync::Mutex::new(v))
    }
    pub(super) fn lock(&self) -> loom::sync::MutexGuard<'_, T> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The tasks and threads waiting for a block (see [`LoanArena::poll_loan`]).
#[derive(Default)]
pub(super) struct Waiters {
    /// Wakers plus blocked threads, readable without the lock (the freer's side of a
    /// Dekker pair).
    count: AtomicUsize,
    list: Mutex<WaitList>,
    /// Where blocked threads (`loan_blocking`) sleep, under `list`'s lock.
    #[cfg(not(gyre_loom))]
    cv: parking_lot::Condvar,
}

#[derive(Default)]
struct WaitList {
    wakers: Vec<Waker>,
    blocked: usize,
}

impl WaitList {
    fn count(&self) -> usize {
        self.wakers.len() + self.blocked
    }
}

impl LoanArena {
    /// [`try_loan`](Self::try_loan) that waits (registering `cx`'s waker) while the pool
    /// is exhausted. [`Error::LoanTooLarge`] is returned at once.
    ///
    /// # Errors
    ///
    /// [`Error::LoanTooLarge`].
    pub fn poll_loan(self: &Arc<Self>, len: usize, cx: &mut Context<'_>) -> Poll<Result<Loan>> {
        let order = match self.order_for(len) {
            Ok(o) => o,
            Err(e) => return Poll::Ready(Err(e)),
        };
        if let Some(unit) = self.take_block(order) {
            return Poll::Ready(Ok(Loan::new(self.clone(), unit, order, len)));
        }
        self.register(cx.waker());
        // Re-check after registering: a block freed before the registration is seen here;
        // one freed after it wakes us (Dekker pair with `wake_waiters`).
        match self.take_block(order) {
            Some(unit) => Poll::Ready(Ok(Loan::new(self.clone(), unit, order, len))),
            None => Poll::Pending,
        }
    }

    /// [`try_loan`](Self::try_loan) that waits on this thread while the pool is
    /// exhausted, until `deadline` if one is given.
    ///
    /// # Errors
    ///
    /// [`Error::LoanTooLarge`]; [`Error::PoolExhausted`] when the deadline passed.
    #[cfg(not(gyre_loom))]
    pub fn loan_blocking(self: &Arc<Self>, len: usize, deadline: Option<Instant>) -> Result<Loan> {
        let order = self.order_for(len)?;
        loop {
            if let Some(unit) = self.take_block(order) {
                return Ok(Loan::new(self.clone(), unit, order, len));
            }
            let mut g = self.waiters.list.lock();
            g.blocked += 1;
            self.waiters.count.store(g.count(), Relaxed);
            // Re-check with the list locked: a return before this is seen here (the book's
            // lock orders it); one after it reads the count, and its notify waits for the
            // list lock, which the wait below releases.
            let got = self.take_block(order);
            let mut expired = false;
            if got.is_none() {
                match deadline {
                    Some(d) if Instant::now() >= d => expired = true,
                    Some(d) => {
                        self.waiters.cv.wait_until(&mut g, d);
                    }
                    None => self.waiters.cv.wait(&mut g),
                }
            }
            g.blocked -= 1;
            self.waiters.count.store(g.count(), Relaxed);
            drop(g);
            if let Some(unit) = got {
                return Ok(Loan::new(self.clone(), unit, order, len));
            }
            if expired {
                return self.try_loan(len);
            }
        }
    }

    /// The loom build's `loan_blocking` (not modelled): try, yield, try again.
    ///
    /// # Errors
    ///
    /// As above.
    #[cfg(gyre_loom)]
    pub fn loan_blocking(self: &Arc<Self>, len: usize, deadline: Option<Instant>) -> Result<Loan> {
        loop {
            match self.try_loan(len) {
                Err(crate::Error::PoolExhausted { .. })
                    if deadline.is_none_or(|d| Instant::now() < d) =>
                {
                    loom::thread::yield_now()
                }
                r => return r,
            }
        }
    }

    /// Registers a waiter. No lost wake-up: the caller retries `take_block` after this,
    /// which takes the book's lock; a return frees its block under the same lock and
    /// reads `count` after it. Either the retry's lock comes after the return's (and sees
    /// the block), or before it, and then this store happens before the return's read
    /// (the lock's release/acquire), which sees a waiter.
    fn register(&self, waker: &Waker) {
        let mut list = self.waiters.list.lock();
        if !list.wakers.iter().any(|w| w.will_wake(waker)) {
            list.wakers.push(waker.clone());
        }
        self.waiters.count.store(list.count(), Relaxed);
    }

    /// Wakes every waiter; called after a block was freed under the book's lock.
    pub(super) fn wake_waiters(&self) {
        if self.waiters.count.load(Relaxed) == 0 {
            return;
        }
        let woken = {
            let mut list = self.waiters.list.lock();
            let woken = std::mem::take(&mut list.wakers);
            self.waiters.count.store(list.count(), Relaxed);
            #[cfg(not(gyre_loom))]
            if list.blocked > 0 {
                self.waiters.cv.notify_all();
            }
            woken
        };
        for w in woken {
            w.wake();
        }
    }
}

//! Batches of loans: many sends with one claim and one head store, many replies taken
//! with one index update. The ring's per-message costs are what a loan adds to a copy;
//! batches spread them.

use gyre_core::channel::{Kind, PublishError};
use gyre_core::loan::LoanHandle;
use gyre_core::{Error, Result};

use super::{check_pool, claim, write_handle, Loan};
use crate::decode::refused;
use crate::Kernel;

impl Kernel<Loan, Loan> {
    /// Sends every loan of `loans` as consecutive requests (replies to
    /// [`recv`](Self::recv) and friends, in order), with one claim and one head
    /// store, if the ring has room for all of them now. All or nothing: `Ok(true)` sent
    /// them all and emptied `loans`; `Ok(false)` the ring is full, `loans` is unchanged.
    ///
    /// # Errors
    ///
    /// [`Error::Closed`] (nothing was sent; `loans` is unchanged), and
    /// [`Error::InvalidArgument`] for a batch longer than the ring or a loan of another
    /// kernel's pool.
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre::{Backend, KernelSpec, Runtime, loan::LoanBuf};
    /// let rt = Runtime::builder().backend(Backend::Cpu).build()?;
    /// let k = rt.launch(KernelSpec::loans("echo", |_: &mut LoanBuf<'_>| Ok(())))?;
    /// let mut batch = (0..8).map(|_| k.loan_blocking(4096)).collect::<Result<Vec<_>, _>>()?;
    /// while !k.try_send_batch(&mut batch)? {}
    /// let mut out = Vec::new();
    /// while out.len() < 8 {
    ///     k.recv_batch_blocking(&mut out, 8)?;
    /// }
    /// assert!(out.iter().all(|r| r.as_ref().is_ok_and(|l| l.len() == 4096)));
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn try_send_batch(&self, loans: &mut Vec<Loan>) -> Result<bool> {
        if loans.is_empty() {
            return Ok(true);
        }
        for l in loans.iter() {
            check_pool(self.pool(), l)?;
        }
        let inner = self.inner();
        // Each loan is taken (bound to its slot) only once the batch's slots are claimed:
        // on any error, none was, and `loans` gets them all back.
        let mut pending: Vec<Option<Loan>> = loans.drain(..).map(Some).collect();
        let r = inner.ch.try_publish_with(
            Kind::Send,
            inner.polling.msg_type,
            pending.len(),
            LoanHandle::SIZE,
            |k, index, dst| write_handle(pending.get_mut(k).and_then(Option::take), index, dst),
        );
        if r.is_ok() {
            return Ok(true);
        }
        loans.extend(pending.into_iter().flatten());
        match r {
            Ok(_) | Err(PublishError::Full) => Ok(false),
            Err(PublishError::BatchTooLarge { len, capacity }) => Err(Error::InvalidArgument {
                name: "batch length",
                value: format!("{len} (capacity {capacity})"),
                reason: "a batch must fit the ring",
            }),
            Err(_) => Err(refused(&inner.ch)),
        }
    }

    /// [`try_send_batch`](Self::try_send_batch), waiting on this thread while the ring
    /// is full.
    ///
    /// # Errors
    ///
    /// As [`Self::try_send_batch`]; a kernel that stopped is [`Error::Closed`].
    pub fn send_batch_blocking(&self, loans: &mut Vec<Loan>) -> Result<()> {
        let inner = self.inner();
        let mut idler = inner.polling.host_idle.idler();
        let mut polls: u32 = 0;
        while !self.try_send_batch(loans)? {
            polls = polls.wrapping_add(1);
            if polls % 256 == 0 && inner.ch.check_stopped().is_some() {
                return Err(refused(&inner.ch));
            }
            idler.idle(false);
        }
        Ok(())
    }

    /// Takes up to `max` ready `send` replies, in order, appending each (a loan, or
    /// the error of its request) to `out`, with one index update. Returns how many (0:
    /// none ready). Never waits.
    ///
    /// # Errors
    ///
    /// The end: the kernel stopped and every accepted send was delivered.
    pub fn try_recv_batch(&self, out: &mut Vec<Result<Loan>>, max: usize) -> Result<usize> {
        let ch = &self.inner().ch;
        ch.try_recv_batch(max, out, |v| claim(self.pool(), ch, v))
    }

    /// [`try_recv_batch`](Self::try_recv_batch), waiting on this thread until at least
    /// one reply is there.
    ///
    /// # Errors
    ///
    /// As [`Self::try_recv_batch`].
    pub fn recv_batch_blocking(&self, out: &mut Vec<Result<Loan>>, max: usize) -> Result<usize> {
        let mut idler = self.inner().polling.host_idle.idler();
        loop {
            let n = self.try_recv_batch(out, max)?;
            if n > 0 {
                return Ok(n);
            }
            idler.idle(false);
        }
    }
}

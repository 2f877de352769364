//! [`Cause`]: the underlying error of a failed backend operation, kept as the `source()`
//! of an [`Error`](crate::Error) instead of being flattened into a string.

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;

/// Why a backend could not do something: the backend's own error (a
/// `gyre_opencl::Error`, a `gyre_cuda::Error`, an `std::io::Error`, ...), kept whole.
///
/// It is the [`source`](std::error::Error::source) of
/// [`Error::Launch`](crate::Error::Launch) and
/// [`Error::BackendUnavailable`](crate::Error::BackendUnavailable), and the text after the
/// colon in their messages. [`Cause::downcast_ref`] recovers the typed error. Cloning is
/// cheap (the error is shared); two causes are equal when their messages are.
///
/// # Examples
///
/// ```
/// use std::error::Error as _;
/// use gyre_core::{Cause, Error};
///
/// let io = std::io::Error::new(std::io::ErrorKind::OutOfMemory, "no threads left");
/// let e = Error::Launch {
///     backend: "cpu",
///     kernel: "echo".into(),
///     source: Cause::context("spawning the kernel thread", io),
/// };
/// assert_eq!(
///     e.to_string(),
///     "cpu backend could not launch kernel 'echo': spawning the kernel thread: no threads left"
/// );
/// let Error::Launch { source, .. } = &e else { unreachable!() };
/// let io = source.downcast_ref::<std::io::Error>().expect("the io::Error is kept");
/// assert_eq!(io.kind(), std::io::ErrorKind::OutOfMemory);
/// assert!(e.source().is_some());
/// ```
#[derive(Clone)]
pub struct Cause(Arc<dyn StdError + Send + Sync + 'static>);

/// A cause that is only a message (nothing typed underneath).
#[derive(Debug)]
struct Message(String);

impl fmt::Display for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl StdError for Message {}

/// A typed error with what was being done when it happened.
#[derive(Debug)]
struct Context {
    what: String,
    error: Box<dyn StdError + Send + Sync + 'static>,
}

impl fmt::Display for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.what, self.error)
    }
}

impl StdError for Context {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&*self.error)
    }
}

impl Cause {
    /// Keeps `error` as the cause.
    ///
    /// # Examples
    ///
    /// ```
    /// let c = gyre_core::Cause::new(std::fmt::Error);
    /// assert!(c.downcast_ref::<std::fmt::Error>().is_some());
    /// ```
    pub fn new<E: StdError + Send + Sync + 'static>(error: E) -> Self {
        Self(Arc::new(error))
    }

    /// A cause that is only a message, for a condition no typed error describes (a
    /// feature left out of the build, a device of the wrong kind).
    ///
    /// # Examples
    ///
    /// ```
    /// let c = gyre_core::Cause::msg("no OpenCL GPU");
    /// assert_eq!(c.to_string(), "no OpenCL GPU");
    /// ```
    pub fn msg(message: impl Into<String>) -> Self {
        Self(Arc::new(Message(message.into())))
    }

    /// `error`, with what was being done (`"spawning the kernel thread"`): displayed as
    /// `what: error`; [`Cause::downcast_ref`] still finds `error`.
    ///
    /// # Examples
    ///
    /// ```
    /// let c = gyre_core::Cause::context("reading the source", std::fmt::Error);
    /// assert_eq!(c.to_string(), "reading the source: an error occurred when formatting an argument");
    /// assert!(c.downcast_ref::<std::fmt::Error>().is_some());
    /// ```
    pub fn context<E: StdError + Send + Sync + 'static>(what: impl Into<String>, error: E) -> Self {
        Self(Arc::new(Context {
            what: what.into(),
            error: Box::new(error),
        }))
    }

    /// The typed error underneath, if it is an `E`.
    ///
    /// # Examples
    ///
    /// ```
    /// let c = gyre_core::Cause::new(std::fmt::Error);
    /// assert!(c.downcast_ref::<std::io::Error>().is_none());
    /// ```
    pub fn downcast_ref<E: StdError + 'static>(&self) -> Option<&E> {
        let e: &(dyn StdError + 'static) = &*self.0;
        if let Some(c) = e.downcast_ref::<Context>() {
            return c.error.downcast_ref::<E>();
        }
        e.downcast_ref::<E>()
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&*self.0, f)
    }
}

impl fmt::Debug for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl StdError for Cause {
    /// The error underneath's own source: a `Cause` stands for the error it holds (its
    /// message is that error's message), so the chain continues below it.
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match (&*self.0 as &(dyn StdError + 'static)).downcast_ref::<Context>() {
            Some(c) => Some(&*c.error),
            None => self.0.source(),
        }
    }
}

impl PartialEq for Cause {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.to_string() == other.to_string()
    }
}

impl Eq for Cause {}

impl From<String> for Cause {
    fn from(message: String) -> Self {
        Self::msg(message)
    }
}

impl From<&str> for Cause {
    fn from(message: &str) -> Self {
        Self::msg(message)
    }
}

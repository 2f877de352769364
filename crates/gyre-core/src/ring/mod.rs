//! The host side of the two rings of a ring kernel.
//!
//! * [`prefix`] — the index algorithms (claim, publication of the written prefix).
//! * [`geometry`] — validated capacity / slot size / batch size.
//! * [`slot`] — raw access to one slot of shared memory.

pub mod geometry;
pub mod prefix;
pub mod slot;

pub use geometry::Geometry;
pub use slot::SlotPtr;

//! Validated ring geometry.

use gyre_abi::{GeometryFault, SLOT_ALIGN, SLOT_HEADER_SIZE};

use crate::error::{Error, Result};

/// Capacity, slot size and batch size of the two rings of a kernel, validated.
///
/// Invariants: `capacity` is a power of two in `2..=2^24`; `slot_size` is a multiple of
/// 128 in `128..=1 MiB`; `batch` is in `1..=capacity`.
///
/// # Examples
///
/// ```
/// use gyre_core::ring::Geometry;
/// let g = Geometry::new(1024, 128, 32).unwrap();
/// assert_eq!(g.payload(), 64);
/// assert!(Geometry::new(1000, 128, 32).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    capacity: u32,
    slot_size: u32,
    batch: u32,
}

/// [`Error::InvalidCapacity`] for `capacity`.
pub fn invalid_capacity(capacity: usize) -> Error {
    Error::InvalidCapacity {
        capacity,
        min: gyre_abi::MIN_CAPACITY as usize,
        max: gyre_abi::MAX_CAPACITY as usize,
    }
}

/// [`Error::InvalidSlotSize`] for `slot_size`.
pub fn invalid_slot_size(slot_size: usize) -> Error {
    Error::InvalidSlotSize {
        slot_size,
        align: SLOT_ALIGN,
        min: gyre_abi::MIN_SLOT_SIZE,
        max: gyre_abi::MAX_SLOT_SIZE,
    }
}

impl Geometry {
    /// Validates and returns the geometry, or the error naming the first bad value.
    pub fn new(capacity: u32, slot_size: u32, batch: u32) -> Result<Self> {
        match gyre_abi::check_geometry(capacity, slot_size, batch) {
            Ok(()) => Ok(Self {
                capacity,
                slot_size,
                batch,
            }),
            Err(GeometryFault::Capacity(c)) => Err(invalid_capacity(c as usize)),
            Err(GeometryFault::SlotSize(s)) => Err(invalid_slot_size(s as usize)),
            Err(GeometryFault::BatchSize(b)) => Err(Error::InvalidBatchSize {
                batch: b as usize,
                capacity: capacity as usize,
            }),
        }
    }

    /// Slots per ring.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }
    /// Bytes per slot.
    pub fn slot_size(&self) -> u32 {
        self.slot_size
    }
    /// Most requests per kernel batch.
    pub fn batch(&self) -> u32 {
        self.batch
    }
    /// Payload bytes per slot.
    pub fn payload(&self) -> usize {
        self.slot_size as usize - SLOT_HEADER_SIZE
    }
    /// `capacity - 1`.
    pub fn mask(&self) -> u64 {
        u64::from(self.capacity) - 1
    }
    /// Bytes of one ring.
    pub fn ring_bytes(&self) -> usize {
        self.capacity as usize * self.slot_size as usize
    }
}

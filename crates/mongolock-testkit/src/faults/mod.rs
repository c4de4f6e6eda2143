//! What tests control: the server clock, fail points and network faults.

pub mod clock;
pub(crate) mod fail_point;
pub mod proxy;

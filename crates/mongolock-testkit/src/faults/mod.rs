//! What tests control: the server clock, fail points and network faults.

pub mod clock;
pub mod fail_point;
pub mod proxy;

//! What tests control: the server clock and fail points.

pub mod clock;
pub mod fail_point;

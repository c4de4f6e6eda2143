//! What tests control: the server clock (and, later, fail points).

pub mod clock;

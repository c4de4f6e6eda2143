//! A TCP fault proxy in front of any MongoDB address.

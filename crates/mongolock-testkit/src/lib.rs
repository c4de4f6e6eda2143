//! A MongoDB wire-protocol emulator for testing mongolock.
#![doc = include_str!("../README.md")]

pub mod engine;

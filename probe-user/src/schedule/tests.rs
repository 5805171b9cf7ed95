//! Scheduler tests on a virtual clock.
use super::*;

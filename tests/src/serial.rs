//! Tests that must not share: the integration tests are one binary (tests/it), so tests of
//! every layer share one process and run in parallel threads. Most only need names of their
//! own (`unique_name`). Two kinds need more:
//!
//! - a test that changes or measures the whole process (its descriptor limit, its open
//!   descriptors, its memory) runs in a process of its own: [`own_process`];
//! - a test that loads the whole machine (a flood of a million frames over both cores) runs
//!   while no other test has a namespace, and other tests wait for their next namespace until
//!   it is done: [`alone`].
use std::{
    process::Command,
    sync::{Condvar, Mutex, MutexGuard, PoisonError},
    thread::ThreadId,
};

/// Set in the child that [`own_process`] starts: the name of the one test it runs.
const OWN_PROCESS_VAR: &str = "PROBED_TEST_OWN_PROCESS";

/// Runs the calling test again in a process of its own and reports how it went there; true in
/// that process, where the test goes on, false in the harness's process, where the test returns
/// (the child passed: a failure there fails it here, with the child's output). The test's first
/// lines: `if !probed_tests::serial::own_process() { return; }`.
///
/// The test is found by its name, which the test harness gives the thread it runs on.
pub fn own_process() -> bool {
    let current = std::thread::current();
    let name = current
        .name()
        .filter(|n| *n != "main")
        .expect("own_process is called on the test's own thread (libtest names it after the test)");
    if std::env::var(OWN_PROCESS_VAR).is_ok_and(|v| v == name) {
        return true;
    }
    // The child's namespaces are not counted by this process: hold a place for them, so that a
    // test that runs `alone` does not start beside it.
    let _shared = Shared::take();
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = Command::new(&exe)
        .args([name, "--exact", "--test-threads=1", "--nocapture"])
        .env(OWN_PROCESS_VAR, name)
        .output()
        .unwrap_or_else(|e| panic!("start {} for {name}: {e}", exe.display()));
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success() && stdout.contains("test result: ok. 1 passed"),
        "{name} in a process of its own ({}):\n{stdout}\n{stderr}",
        out.status
    );
    // What the test said, where the harness collects it for this test.
    eprint!("{stderr}");
    false
}

/// Who holds the machine: how many namespaces exist in this process, and which thread, if
/// any, runs alone.
struct State {
    namespaces: usize,
    alone: Option<ThreadId>,
}

static STATE: Mutex<State> = Mutex::new(State {
    namespaces: 0,
    alone: None,
});
static CHANGED: Condvar = Condvar::new();

fn state() -> MutexGuard<'static, State> {
    // A test that panicked while holding the lock left the counts right: go on.
    STATE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The calling test runs alone until this is dropped: no other test has a namespace meanwhile.
/// Take it first thing in the test, before its own namespaces.
#[must_use = "the test runs alone only while this is held"]
pub struct Alone(());

/// Waits until no other test has a namespace, then keeps them from making one until the guard
/// is dropped. Their namespaces are waited for, never taken away: a test that holds one keeps
/// it; the wait ends between two tests. The calling thread's own namespaces are let through;
/// the test must not make one from another thread while it holds this.
pub fn alone() -> Alone {
    let me = std::thread::current().id();
    let mut s = state();
    while s.namespaces > 0 || s.alone.is_some() {
        s = CHANGED.wait(s).unwrap_or_else(PoisonError::into_inner);
    }
    s.alone = Some(me);
    Alone(())
}

impl Drop for Alone {
    fn drop(&mut self) {
        state().alone = None;
        CHANGED.notify_all();
    }
}

/// A test's place on the machine, held by each namespace (`Netns`) while it exists: while one
/// is held, no test runs `alone`.
pub(crate) struct Shared(());

impl Shared {
    /// Waits while another thread's test runs alone, then counts one more namespace.
    pub(crate) fn take() -> Shared {
        let me = std::thread::current().id();
        let mut s = state();
        while s.alone.is_some_and(|t| t != me) {
            s = CHANGED.wait(s).unwrap_or_else(PoisonError::into_inner);
        }
        s.namespaces += 1;
        Shared(())
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        state().namespaces -= 1;
        CHANGED.notify_all();
    }
}

//! A test that fails part-way leaves nothing behind: no namespace, no pinned map, no
//! loaded program.
use probed::kernel::{pin::PinDir, rx::RxProgram};
use probed_tests::{topo::PROBER_IF, Netns, TestPins, Topology};

#[test]
fn failing_test_leaves_nothing_behind() {
    let (tx, rx_names) = std::sync::mpsc::channel();
    let outcome = std::panic::catch_unwind(move || {
        let topo = Topology::new();
        topo.anyip("198.19.0.0/24");
        let pins = TestPins::new();
        tx.send((
            topo.prober.name.clone(),
            topo.backend.name.clone(),
            pins.path.clone(),
            0u32,
        ))
        .unwrap();
        topo.prober.enter(|| {
            let rx = RxProgram::attach(
                PROBER_IF,
                probed_tests::l4::xdp_mode(),
                PinDir::create(&pins.path).unwrap(),
            )
            .unwrap();
            let id = rx.program_id().unwrap();
            tx.send((String::new(), String::new(), pins.path.clone(), id)).unwrap();
            assert!(program_loaded(id), "program {id} is loaded while attached");
            panic!("deliberate failure with everything set up");
        });
    });
    assert!(outcome.is_err(), "the inner test failed as planned");
    let (prober, backend, pin_path, _) = rx_names.recv().unwrap();
    let (_, _, _, id) = rx_names.recv().unwrap();
    assert!(!Netns::exists(&prober), "prober namespace {prober} removed");
    assert!(!Netns::exists(&backend), "backend namespace {backend} removed");
    assert!(!pin_path.exists(), "pin directory {} removed", pin_path.display());
    // Program teardown is synchronous on close, but give the kernel a moment to release it.
    let gone = (0..50).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(20));
        !program_loaded(id)
    });
    assert!(gone, "program {id} unloaded");
}

fn program_loaded(id: u32) -> bool {
    aya::programs::loaded_programs().flatten().any(|p| p.id() == id)
}

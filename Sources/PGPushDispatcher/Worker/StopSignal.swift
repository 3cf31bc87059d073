import Synchronization

/// A one-way flag shared by a service's tasks: once set (graceful shutdown), nothing new starts (the webhook relay's;
/// the worker's shutdown state is its ``WorkerLifecycle``).
final class StopSignal: Sendable {
    private let flag = Atomic<Bool>(false)

    var isSet: Bool { flag.load(ordering: .relaxed) }

    func set() { flag.store(true, ordering: .relaxed) }
}

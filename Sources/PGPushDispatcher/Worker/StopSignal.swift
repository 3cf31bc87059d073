import Synchronization

/// A one-way flag shared by the worker's tasks: once set (graceful shutdown), nothing new starts.
final class StopSignal: Sendable {
    private let flag = Atomic<Bool>(false)

    var isSet: Bool { flag.load(ordering: .relaxed) }

    func set() { flag.store(true, ordering: .relaxed) }
}

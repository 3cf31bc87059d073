import Synchronization

/// The room one claimed chunk holds in the scheduler, freed token by token as answers arrive and in full when
/// the chunk ends. A range chunk's audience may have grown since it was counted; the extra tokens were never
/// reserved, so they free nothing.
final class RoomReservation: Sendable {
    private let remaining: Atomic<Int>
    private let free: @Sendable (Int) -> Void

    init(tokens: Int, free: @escaping @Sendable (Int) -> Void) {
        remaining = Atomic(tokens)
        self.free = free
    }

    func releaseOne() {
        if remaining.subtract(1, ordering: .relaxed).newValue >= 0 { free(1) }
    }

    func releaseRest() {
        let left = remaining.exchange(0, ordering: .relaxed)
        if left > 0 { free(left) }
    }
}

/// A wake-up call for one service's loop: signals coalesce, so a loop woken many times while busy runs once
/// more, not once per signal.
final class Wake: Sendable {
    let signals: AsyncStream<Void>
    private let continuation: AsyncStream<Void>.Continuation

    init() {
        (signals, continuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
    }

    func signal() { continuation.yield() }
}

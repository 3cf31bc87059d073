import Foundation
import Synchronization

/// A thread that keeps one core busy beside a bench, as another service on a shared host would: a loop that
/// never sleeps, at normal priority. Bounded twice: ``stop()`` ends it, and it ends on its own after `limit`.
///
/// A thread of the bench's own process rather than a child process: with a second child running, Foundation's
/// `Process` on Linux did not see h2load end, and the bench spun waiting for it.
final class CPUHog: Sendable {
    private let stopped = Atomic<Bool>(false)

    private init() {}

    /// Starts the loop; it ends by itself after `limit`.
    static func start(limit: Duration) -> CPUHog {
        let hog = CPUHog()
        let thread = Thread { [hog] in
            let end = ContinuousClock.now + limit
            var spins: UInt64 = 0
            while !hog.stopped.load(ordering: .relaxed) {
                spins &+= 1
                // Reading the clock every few million turns keeps the loop busy, not in the clock.
                if spins & 0x3F_FFFF == 0, ContinuousClock.now >= end { return }
            }
        }
        thread.name = "pgpush-cpu-hog"
        thread.start()
        return hog
    }

    func stop() {
        stopped.store(true, ordering: .relaxed)
    }
}

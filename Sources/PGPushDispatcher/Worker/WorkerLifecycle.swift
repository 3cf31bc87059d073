import Logging
import PGPushStore
import Synchronization

/// The one owner of the worker's shutdown state and of the work it holds: whether it is still starting,
/// running or stopping (a graceful shutdown started: no new request starts, what was not sent is given back),
/// whether the database took its last write (`/readyz`), and the chunks it holds, claimed and not yet written,
/// which the heartbeat renews.
///
/// The services change it only through this API: ``registered()``, ``beginShutdown()``, ``hold(_:)``,
/// ``written(_:)``, ``giveBack(_:to:logger:metadata:)`` and ``databaseTookWrite(_:)``.
final class WorkerLifecycle: Sendable {
    enum Phase: UInt8, Sendable {
        /// Not registered yet: nothing is claimed.
        case starting
        case running
        /// A graceful shutdown started: claiming has stopped and no new request starts.
        case stopping
    }

    private let rawPhase = Atomic<UInt8>(Phase.starting.rawValue)
    /// Whether the last write (registration, claim, result write) went through: a read proves nothing, since a
    /// standby answers reads.
    private let writesTaken = Atomic<Bool>(false)
    /// Claimed by this process, their completion not yet written.
    private let held = Mutex<Set<Int64>>([])

    init() {}

    var phase: Phase { Phase(rawValue: rawPhase.load(ordering: .relaxed)) ?? .starting }

    /// True once a graceful shutdown started: no new request is started; what was not sent is given back.
    var isStopping: Bool { phase == .stopping }

    /// The worker registered: it takes work from now on.
    func registered() {
        _ = rawPhase.compareExchange(expected: Phase.starting.rawValue, desired: Phase.running.rawValue, ordering: .relaxed)
        databaseTookWrite(true)
    }

    /// A graceful shutdown starts. Returns true the first time only.
    @discardableResult
    func beginShutdown() -> Bool {
        rawPhase.exchange(Phase.stopping.rawValue, ordering: .relaxed) != Phase.stopping.rawValue
    }

    // MARK: Readiness

    /// Records whether a write the worker sent went through.
    func databaseTookWrite(_ took: Bool) {
        writesTaken.store(took, ordering: .relaxed)
    }

    /// Whether the worker's last write went through (false until it registered).
    var databaseTakesWrites: Bool { writesTaken.load(ordering: .relaxed) }

    // MARK: Held chunks

    /// Chunks just claimed: held until their completion is written or they are given back. Record them before
    /// they start, so a chunk that ends at once is never written before it was held.
    func hold(_ chunks: [ClaimedChunk]) {
        guard !chunks.isEmpty else { return }
        held.withLock { held in for chunk in chunks { held.insert(chunk.id) } }
    }

    /// These chunks' completions were written (or another worker records them): no longer held.
    func written(_ ids: some Sequence<Int64>) {
        held.withLock { held in for id in ids { held.remove(id) } }
    }

    /// The chunks held now, for the heartbeat to renew.
    var heldChunks: [Int64] { held.withLock { Array($0) } }

    /// Gives chunks back unsent (shutdown): no longer held, and released in the database within two seconds,
    /// or rescued when their lease runs out if the database does not take that. Returns whether it took it.
    @discardableResult
    func giveBack(_ ids: [Int64], to store: any WorkerStore, logger: Logger, _ warning: @autoclosure () -> Logger.Message,
                  metadata: Logger.Metadata = [:]) async -> Bool {
        written(ids)
        // Not cancelled with the caller: a shutdown cancels the services, and this is how they hand back what they
        // hold. The release has its own two-second deadline.
        if (try? await withCancellationDelayed(by: .seconds(3), { try await store.release(ids, deadline: .seconds(2)) })) == nil {
            logger.warning(warning(), metadata: metadata)
            return false
        }
        return true
    }
}

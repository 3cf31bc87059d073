import Foundation
import Synchronization

/// The counters every simulator's fault injector needs, whatever protocol it speaks.
final class SimulatorRequestCounters: Sendable {
    /// Requests received by the whole server: the connection-level faults (reset, GOAWAY every N streams) count
    /// across connections, so a GOAWAY every 5,000 streams does not keep a reset every 20,000 from ever firing.
    private let requestCounter = Atomic<Int>(0)
    private let connectionCounter = Atomic<Int>(0)
    /// Requests seen per device token; only maintained while a fault needs it.
    private let attemptsByToken = Mutex<[String: Int]>([:])

    /// The 1-based number of the request just received, server-wide.
    func nextRequestNumber() -> Int {
        requestCounter.add(1, ordering: .relaxed).newValue
    }

    /// The 1-based number of the connection just accepted (seeds its latency draws).
    func nextConnectionNumber() -> Int {
        connectionCounter.wrappingAdd(1, ordering: .relaxed).newValue
    }

    /// Counts this attempt for the token and returns its 1-based number.
    func nextAttempt(forToken token: String) -> Int {
        attemptsByToken.withLock { attempts in
            let next = (attempts[token] ?? 0) + 1
            attempts[token] = next
            return next
        }
    }

    /// Requests to the broadcast channel management API and broadcast sends, for their ``SimulatorRequestFaults``.
    private let channelRequestCounter = Atomic<Int>(0)
    private let broadcastCounter = Atomic<Int>(0)

    /// The 1-based number of this channel management request since the faults last changed.
    func nextChannelRequestNumber() -> Int {
        channelRequestCounter.add(1, ordering: .relaxed).newValue
    }

    /// The 1-based number of this broadcast since the faults last changed.
    func nextBroadcastNumber() -> Int {
        broadcastCounter.add(1, ordering: .relaxed).newValue
    }

    /// Forgets the attempts per token and the per-API request counts (after the faults change), so a new
    /// `failFirst` counts from the change.
    func resetAttempts() {
        attemptsByToken.withLock { $0.removeAll() }
        channelRequestCounter.store(0, ordering: .relaxed)
        broadcastCounter.store(0, ordering: .relaxed)
    }
}

/// State shared by every connection of one APNs simulator: configuration, the parts tests may change at run
/// time, and the recorders.
final class SimulatorServerContext: Sendable {
    struct Dynamic: Sendable {
        var registry: SimulatorTokenRegistry
        var faults: SimulatorFaults
    }

    let configuration: APNsSimulatorConfiguration
    let authority: ProviderTokenAuthority
    let ledger: SimulatorLedger
    let statistics: SimulatorStatisticsRecorder
    let counters = SimulatorRequestCounters()
    let dynamic: Mutex<Dynamic>
    /// Broadcast channels, shared by the management port (which makes and deletes them) and the device port
    /// (whose broadcasts name them).
    let channels = SimulatorChannels()
    let broadcastLedger = SimulatorBroadcastLedger()
    /// The management port's answers, apart from the device port's ``statistics``.
    let channelStatistics = SimulatorStatisticsRecorder()

    init(configuration: APNsSimulatorConfiguration) {
        self.configuration = configuration
        self.statistics = SimulatorStatisticsRecorder()
        self.authority = ProviderTokenAuthority(configuration: configuration, statistics: statistics)
        self.ledger = SimulatorLedger(ledgerFile: configuration.ledgerFile,
                                      keepsPayloads: configuration.ledgerKeepsPayloads)
        self.dynamic = Mutex(Dynamic(registry: configuration.registry, faults: configuration.faults))
    }

    var snapshot: Dynamic { dynamic.withLock { $0 } }
}

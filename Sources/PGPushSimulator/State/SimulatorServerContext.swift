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

    /// Forgets the attempts per token (after the faults change).
    func resetAttempts() {
        attemptsByToken.withLock { $0.removeAll() }
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

    init(configuration: APNsSimulatorConfiguration) {
        self.configuration = configuration
        self.statistics = SimulatorStatisticsRecorder()
        self.authority = ProviderTokenAuthority(configuration: configuration, statistics: statistics)
        self.ledger = SimulatorLedger(ledgerFile: configuration.ledgerFile)
        self.dynamic = Mutex(Dynamic(registry: configuration.registry, faults: configuration.faults))
    }

    var snapshot: Dynamic { dynamic.withLock { $0 } }
}

import Foundation
import Synchronization

/// State shared by every connection of one simulator: configuration, the parts tests may change at run time,
/// and the recorders.
final class SimulatorServerContext: Sendable {
    struct Dynamic: Sendable {
        var registry: SimulatorTokenRegistry
        var faults: SimulatorFaults
    }

    let configuration: APNsSimulatorConfiguration
    let authority: ProviderTokenAuthority
    let ledger: SimulatorLedger
    let statistics: SimulatorStatisticsRecorder
    /// Requests received by the whole server: the connection-level faults (reset, GOAWAY every N streams) count
    /// across connections, so a GOAWAY every 5,000 streams does not keep a reset every 20,000 from ever firing.
    private let requestCounter = Atomic<Int>(0)

    func nextRequestNumber() -> Int {
        requestCounter.add(1, ordering: .relaxed).newValue
    }
    let dynamic: Mutex<Dynamic>
    /// Requests seen per device token; only maintained while a fault needs it.
    let attemptsByToken = Mutex<[String: Int]>([:])
    let connectionCounter = Atomic<Int>(0)

    init(configuration: APNsSimulatorConfiguration) {
        self.configuration = configuration
        self.statistics = SimulatorStatisticsRecorder()
        self.authority = ProviderTokenAuthority(configuration: configuration, statistics: statistics)
        self.ledger = SimulatorLedger(ledgerFile: configuration.ledgerFile)
        self.dynamic = Mutex(Dynamic(registry: configuration.registry, faults: configuration.faults))
    }

    var snapshot: Dynamic { dynamic.withLock { $0 } }

    /// Counts this attempt for the token and returns its 1-based number.
    func nextAttempt(forToken token: String) -> Int {
        attemptsByToken.withLock { attempts in
            let next = (attempts[token] ?? 0) + 1
            attempts[token] = next
            return next
        }
    }
}

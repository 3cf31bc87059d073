import ArgumentParser
import Foundation
import PGPushCLISupport
import PGPushSimulator

/// `--latency-ms N|MIN-MAX` of the bench modes that run the simulator in this process: real APNs answers in
/// tens of milliseconds, and a loopback simulator that answers at once hides how the worker overlaps waits.
struct SimulatorLatencyOptions: ParsableArguments {
    @Option(help: ArgumentHelp(
        "Delay each answer of the in-process simulator: N or MIN-MAX milliseconds (0 = none).", valueName: "ms"))
    var latencyMs: String?

    /// Parsed in `validate()` so a bad value is a usage error before anything starts.
    func validate() throws {
        _ = try latency
    }

    /// The delay to put into the simulator's `faults.latency`.
    var latency: SimulatorLatency {
        get throws { try latencyMs.map(Self.parseLatency) ?? .none }
    }

    /// `N` or `MIN-MAX` milliseconds, as `pgpush simulator --latency-ms` reads them.
    static func parseLatency(_ text: String) throws -> SimulatorLatency {
        guard let latency = SimulatorLatency(milliseconds: text) else { throw ValidationError("--latency-ms must be N or MIN-MAX") }
        return latency
    }
}

/// `--db-latency-ms N` of the bench modes: the workers reach PostgreSQL through a TCP proxy that adds N ms to
/// every round trip (half each way). This kernel has no netem; a proxy is the way to put the database one
/// network hop away and see every statement that waits on a round trip per job or per chunk.
struct DatabaseLatencyOptions: ParsableArguments {
    @Option(help: ArgumentHelp(
        "Add this round trip, in milliseconds, between the workers and PostgreSQL (a delaying TCP proxy).", valueName: "ms"))
    var dbLatencyMs: Double?

    func validate() throws {
        if let dbLatencyMs, !(0...1000).contains(dbLatencyMs) { throw ValidationError("--db-latency-ms must be between 0 and 1000") }
    }

    var roundTrip: Duration? {
        dbLatencyMs.flatMap { $0 > 0 ? .microseconds(Int64(($0 * 1000).rounded())) : nil }
    }
}

extension SimulatorLatency {
    /// Lower and upper bound in milliseconds (both 0 for none).
    var millisecondBounds: (min: Double, max: Double) {
        switch self {
        case .none: (0, 0)
        case .fixed(let delay): (delay.milliseconds, delay.milliseconds)
        case .uniform(let low, let high): (low.milliseconds, high.milliseconds)
        }
    }

    /// For reports: `none`, `40 ms` or `5-20 ms`.
    var label: String {
        let (low, high) = millisecondBounds
        func format(_ value: Double) -> String { value == value.rounded() ? String(Int(value)) : String(value) }
        switch self {
        case .none: return "none"
        case .fixed: return "\(format(low)) ms"
        case .uniform: return "\(format(low))-\(format(high)) ms"
        }
    }

    /// For `--json`: `{"min": …, "max": …}` in milliseconds.
    var json: [String: Any] {
        let (low, high) = millisecondBounds
        return ["min": low, "max": high]
    }
}

private extension Duration {
    var milliseconds: Double { seconds * 1000 }
}

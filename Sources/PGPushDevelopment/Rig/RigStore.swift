import Foundation
import Logging
import PGPushStore
import PostgresNIO

/// The statements of the bench and demo rig (`pgpush demo`, `pgpush bench`) that no production path sends:
/// synthetic devices, polling of the rig's own jobs, measurements. Grouped in the `RigStore+*.swift` files of
/// this folder; what an operator also runs (adding an app, a job's progress) is in `OperatorStore`.
public struct RigStore: Sendable {
    /// Runs the statements, as it does the operator's.
    let runner: OperatorStore

    public init(connection: PostgresConnection, logger: Logger) {
        runner = OperatorStore(connection: connection, logger: logger)
    }

    @discardableResult
    func run(_ query: PostgresQuery) async throws -> [PostgresRow] { try await runner.run(query) }

    /// Rows of `state, count(*)` as a dictionary.
    static func stateCounts(_ rows: [PostgresRow]) throws -> [String: Int] {
        var states: [String: Int] = [:]
        for row in rows {
            let (state, count) = try row.decode((String, Int64).self)
            states[state] = Int(count)
        }
        return states
    }
}

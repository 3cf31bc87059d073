import Foundation
import PostgresNIO

/// Live Activity update tokens for the demo, in one statement; its jobs and channels go through the
/// operator store, as a producer's calls would.
extension RigStore {
    /// `count` update tokens (prefix `a1`), one per activity `<activityPrefix><n>`; the activities' ids.
    public func registerActivityTokens(appID: String, count: Int, activityPrefix: String) async throws -> [String] {
        try await run("""
            SELECT push.register_device(\(appID), 'a1' || lpad(to_hex(g), 62, '0'), token_kind => 'activity',
                                        activity_id => \(activityPrefix) || g)
              FROM generate_series(1, \(count)) g
            """)
        return count > 0 ? (1...count).map { "\(activityPrefix)\($0)" } : []
    }
}

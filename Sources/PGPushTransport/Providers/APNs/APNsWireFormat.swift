import Foundation
import NIOCore
import NIOHPACK
import PGPushCore

/// The JSON body APNs sends with an error status: `{"reason": "...", "timestamp": 1700000000000}`.
struct APNsResponseBody: Sendable, Hashable {
    var reason: String?
    var timestampMilliseconds: Int64?

    private struct Wire: Decodable {
        var reason: String?
        var timestamp: Int64?
    }

    /// Lenient: a body that is empty or not JSON yields no reason rather than an error.
    static func parse(_ bytes: [UInt8]) -> APNsResponseBody {
        guard !bytes.isEmpty, let wire = try? JSONDecoder().decode(Wire.self, from: Data(bytes)) else {
            return APNsResponseBody()
        }
        return APNsResponseBody(reason: wire.reason, timestampMilliseconds: wire.timestamp)
    }
}

/// Response reasons after which APNs expects a fresh connection.
enum APNsConnectionBoundReasons {
    static let retireConnection: Set<String> = ["UnrelatedKeyIdInToken", "Shutdown", "IdleTimeout"]
}

extension ProviderResponse {
    /// A 403 that names the provider token (ExpiredProviderToken and its kin) goes back to the token's source.
    var apnsProviderTokenRejection: String? {
        status == 403 ? reason : nil
    }
}

extension ProviderResponse {
    /// Whether APNs expects a fresh connection after this answer (`UnrelatedKeyIdInToken`, `Shutdown`,
    /// `IdleTimeout`); ``APNsRules`` answers with it.
    var retiresConnection: Bool {
        guard let reason else { return false }
        return APNsConnectionBoundReasons.retireConnection.contains(reason)
    }
}

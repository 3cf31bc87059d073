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

/// Builds the HPACK header block of one APNs request.
enum APNsRequestHeaders {
    static func make(for request: APNsRequest, authority: String, authorization: String?) -> HPACKHeaders {
        var headers = HPACKHeaders()
        headers.reserveCapacity(12)
        headers.add(name: ":method", value: "POST")
        headers.add(name: ":scheme", value: "https")
        // Values unique to one request are never indexed: inserting them would churn the HPACK table on both
        // ends and evict the long-lived entries (the JWT above all) that make every other header one byte.
        headers.add(name: ":path", value: "/3/device/\(request.deviceToken)", indexing: .nonIndexable)
        headers.add(name: ":authority", value: authority)
        if let authorization {
            // Indexable on purpose: the JWT is the same for ~50 minutes, so HPACK sends it once per connection.
            headers.add(name: "authorization", value: authorization)
        }
        headers.add(name: "apns-topic", value: request.topic)
        headers.add(name: "apns-push-type", value: request.pushType.rawValue)
        if let priority = request.priority { headers.add(name: "apns-priority", value: String(priority.rawValue)) }
        if let expiration = request.expiration { headers.add(name: "apns-expiration", value: String(expiration)) }
        if let collapseID = request.collapseID { headers.add(name: "apns-collapse-id", value: collapseID) }
        headers.add(name: "apns-id", value: request.apnsID.apnsIDString, indexing: .nonIndexable)
        headers.add(name: "content-length", value: String(request.payload.count))
        return headers
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

import Foundation
import NIOHPACK
import PGPushCore

/// One request to APNs' broadcast channel management API (iOS 18): create, read or delete a channel, or list
/// every channel of an app.
///
/// The API has its own hosts and ports (`api-manage-broadcast.sandbox.push.apple.com:2195`,
/// `api-manage-broadcast.push.apple.com:2196`), so it needs a pool of its own, with the same credentials as
/// device pushes. Its answers keep their bodies: a read answers the channel's settings, a list the ids
/// (``APNsChannelList``). A list of many channels is long (about 27 bytes an id, 10,000 ids at most): give that
/// pool a ``HTTP2ClientConfiguration/maximumResponseBodyBytes`` of about 300 KB.
///
/// What each answer carries: create → 201 (any 2xx; one client saw 200) with the id in
/// ``ProviderResponse/channelID``; read → 200 with `{"message-storage-policy": n, "push-type": "LiveActivity"}`;
/// delete → 204; list → 200 with `{"channels": [...]}`. Errors are 4xx/5xx with APNs' `reason`.
public struct APNsChannelRequest: PushRequest, Sendable, Hashable {
    /// What the request does.
    public enum Operation: Sendable, Hashable {
        /// `POST /1/apps/<bundle id>/channels`. `storagePolicy` 0 stores no message (a higher publishing
        /// budget, for frequent updates); 1 keeps the most recent message for up to 8 hours.
        case create(storagePolicy: Int)
        /// `GET /1/apps/<bundle id>/channels` with the id in `apns-channel-id`.
        case read(channelID: String)
        /// `DELETE /1/apps/<bundle id>/channels` with the id in `apns-channel-id`.
        case delete(channelID: String)
        /// `GET /1/apps/<bundle id>/all-channels`.
        case listAll
    }

    /// The bare bundle id; a push-type suffix is refused with `TopicDisallowed`.
    public var bundleID: String
    public var operation: Operation
    /// Sent as `apns-request-id`; APNs echoes it.
    public var requestID: UUID

    public init(bundleID: String, operation: Operation, requestID: UUID) {
        self.bundleID = bundleID
        self.operation = operation
        self.requestID = requestID
    }

    public func headers(authority: String, authorization: String?) -> HPACKHeaders {
        var headers = HPACKHeaders()
        headers.reserveCapacity(8)
        headers.add(name: ":method", value: method)
        headers.add(name: ":scheme", value: "https")
        headers.add(name: ":path", value: path)
        headers.add(name: ":authority", value: authority)
        if let authorization { headers.add(name: "authorization", value: authorization) }
        switch operation {
        case .read(let channelID), .delete(let channelID):
            // The id travels in this header, never in the path.
            headers.add(name: "apns-channel-id", value: channelID, indexing: .nonIndexable)
        case .create, .listAll:
            break
        }
        headers.add(name: "apns-request-id", value: requestID.apnsIDString, indexing: .nonIndexable)
        let body = self.body
        if !body.isEmpty {
            headers.add(name: "content-type", value: "application/json")
            headers.add(name: "content-length", value: String(body.count))
        }
        return headers
    }

    /// The HTTP method of ``operation``.
    public var method: String {
        switch operation {
        case .create: "POST"
        case .read, .listAll: "GET"
        case .delete: "DELETE"
        }
    }

    /// The `:path` of ``operation``.
    public var path: String {
        switch operation {
        case .create, .read, .delete: "/1/apps/\(bundleID)/channels"
        case .listAll: "/1/apps/\(bundleID)/all-channels"
        }
    }

    /// Only a creation has a body; GET and DELETE end the stream with their headers.
    public var body: [UInt8] {
        guard case .create(let storagePolicy) = operation else { return [] }
        return Array(#"{"message-storage-policy":\#(storagePolicy),"push-type":"LiveActivity"}"#.utf8)
    }

    /// Successes carry data (a read's settings, a list's ids).
    public static var keepsResponseBody: Bool { true }
}

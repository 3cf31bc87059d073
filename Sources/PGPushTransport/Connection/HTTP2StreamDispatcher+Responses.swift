import Foundation
import NIOHPACK
import NIOHTTP2
import PGPushCore

/// Reading a response: its header block, and what a stream's end means for its request.
extension HTTP2StreamDispatcher {
    /// The response headers the dispatcher reads.
    enum ResponseField {
        case status, apnsID, retryAfter, channelID

        /// HTTP/2 names are lowercase on the wire (RFC 9113 §8.2.1), so the exact comparison almost always
        /// decides; header validation is off, so a server's uppercase spelling is still read, as before.
        init?(_ name: String) {
            switch name {
            case ":status": self = .status
            case "apns-id": self = .apnsID
            case "retry-after": self = .retryAfter
            case "apns-channel-id": self = .channelID
            default:
                guard name.utf8.contains(where: { $0 >= UInt8(ascii: "A") && $0 <= UInt8(ascii: "Z") }) else { return nil }
                self.init(name.lowercased())
            }
        }
    }

    /// Reads the first header block of a response in one pass, each header's first occurrence as
    /// `HPACKHeaders.first(name:)` would, where a lookup per header scanned the block each time.
    static func readResponseHeaders(_ headers: HPACKHeaders, into stream: inout OpenStream) {
        var statusText: String?
        var apnsIDText: String?
        var retryAfter: String?
        var channelID: String?
        for (name, value, _) in headers {
            switch ResponseField(name) {
            case .status: statusText = statusText ?? value
            case .apnsID: apnsIDText = apnsIDText ?? value
            case .retryAfter: retryAfter = retryAfter ?? value
            // Only the broadcast channel API sends it (with 201, on creation).
            case .channelID: channelID = channelID ?? value
            case nil: break
            }
        }
        guard let status = statusText.flatMap({ Int($0) }) else {
            stream.sawHeadersWithoutStatus = true
            return
        }
        stream.status = status
        stream.apnsID = apnsIDText.flatMap { UUID(apnsIDString: $0) }
        if status != 200 { stream.retryAfter = retryAfter }
        stream.channelID = channelID
    }

    /// A stream that closed before END_STREAM: a response if its status arrived and nothing reset it.
    static func endWithoutResponse(_ stream: OpenStream, streamID: HTTP2StreamID, resetCode: UInt32?) -> HTTP2StreamResult {
        if stream.status != nil, resetCode == nil {
            return response(of: stream, streamID: streamID)
        }
        return .closed(streamID: Int(streamID), resetCode: resetCode, sawHeadersWithoutStatus: stream.sawHeadersWithoutStatus)
    }

    static func response(of stream: OpenStream, streamID: HTTP2StreamID) -> HTTP2StreamResult {
        guard let status = stream.status else {
            return .closed(streamID: Int(streamID), resetCode: nil, sawHeadersWithoutStatus: true)
        }
        // An error's reason is parsed whether or not the body is kept: the broadcast channel API keeps its
        // bodies (they carry data on success) and still answers errors in APNs' shape. FCM's and OAuth's error
        // bodies have no top-level reason, so theirs stays nil.
        let body = (200..<300).contains(status) ? APNsResponseBody() : APNsResponseBody.parse(stream.body)
        return .response(ProviderResponse(
            status: status,
            reason: body.reason,
            timestampMilliseconds: body.timestampMilliseconds,
            apnsID: stream.apnsID,
            retryAfter: stream.retryAfter,
            channelID: stream.channelID,
            body: stream.keepsBody ? stream.body : []
        ))
    }
}

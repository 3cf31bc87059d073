import NIOHPACK
import NIOHTTP2
import PGPushCore

/// Reading a response: its status, and what a stream's end means for its request. What the rest of an answer
/// says (its headers, its body) is read by the provider's rules, once, when the stream ends.
extension HTTP2StreamDispatcher {
    /// Reads the first header block of a response: its `:status` (the first one, as
    /// `HPACKHeaders.first(name:)` would; pseudo-headers come first, so the search stops at once), and the
    /// block itself for the provider's rules.
    static func readResponseHeaders(_ headers: HPACKHeaders, into stream: inout OpenStream) {
        var statusText: String?
        for (name, value, _) in headers where HTTP2HeaderName.matches(name, ":status") {
            statusText = value
            break
        }
        guard let status = statusText.flatMap({ Int($0) }) else {
            stream.sawHeadersWithoutStatus = true
            return
        }
        stream.status = status
        stream.headers = headers
    }

    /// A stream that closed before END_STREAM: a response if its status arrived and nothing reset it.
    func endWithoutResponse(_ stream: OpenStream, streamID: HTTP2StreamID, resetCode: UInt32?) -> HTTP2StreamResult {
        if stream.status != nil, resetCode == nil {
            return response(of: stream, streamID: streamID)
        }
        return .closed(streamID: Int(streamID), resetCode: resetCode, sawHeadersWithoutStatus: stream.sawHeadersWithoutStatus)
    }

    func response(of stream: OpenStream, streamID: HTTP2StreamID) -> HTTP2StreamResult {
        guard let status = stream.status else {
            return .closed(streamID: Int(streamID), resetCode: nil, sawHeadersWithoutStatus: true)
        }
        return .response(rules.response(status: status, headers: stream.headers, body: stream.body, keepsBody: stream.keepsBody))
    }
}

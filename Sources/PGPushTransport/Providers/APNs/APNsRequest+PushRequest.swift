import NIOHPACK
import PGPushCore

/// An APNs notification as an HTTP/2 request: `POST /3/device/<token>` with the `apns-*` headers.
extension APNsRequest: PushRequest {
    public func headers(authority: String, authorization: String?) -> HPACKHeaders {
        APNsRequestHeaders.make(for: self, authority: authority, authorization: authorization)
    }

    public var body: [UInt8] { payload }

    public static var keepsResponseBody: Bool { false }
}

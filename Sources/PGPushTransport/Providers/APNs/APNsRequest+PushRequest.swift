import NIOHPACK
import PGPushCore

/// An APNs notification as an HTTP/2 request: `POST /3/device/<token>` with the `apns-*` headers.
extension APNsRequest: PushRequest {
    public func headerBlock(authority: String, authorization: String?) -> HTTP2HeaderBlock {
        APNsHeaderTemplate(self).block(
            deviceToken: deviceToken, apnsID: apnsID, contentLength: payload.count, authority: authority,
            authorization: authorization)
    }

    public func headers(authority: String, authorization: String?) -> HPACKHeaders {
        headerBlock(authority: authority, authorization: authorization).hpackHeaders
    }

    public var body: [UInt8] { payload }

    public static var keepsResponseBody: Bool { false }
}

import NIOHPACK

/// One FCM HTTP v1 `messages:send` request: the message for one registration token.
public struct FCMSendRequest: PushRequest, Hashable {
    /// `/v1/projects/<project>/messages:send`.
    public var path: String
    /// `{"message":{"token":…, …}}`, built by ``FCMRequestBodyBuilder``.
    public var body: [UInt8]

    public init(projectID: String, body: [UInt8]) {
        self.init(path: Self.path(projectID: projectID), body: body)
    }

    /// With the send path already built (once per chunk rather than once per token).
    public init(path: String, body: [UInt8]) {
        self.path = path
        self.body = body
    }

    /// The send path of a project. Project ids are checked when the service account is read, so they are safe
    /// as a path segment.
    public static func path(projectID: String) -> String {
        "/v1/projects/\(projectID)/messages:send"
    }

    public func headers(authority: String, authorization: String?) -> HPACKHeaders {
        // Unlike APNs' per-device path, this one is the same for every request: HPACK sends it once.
        HPACKHeaders.post(path: path, authority: authority, authorization: authorization,
                          contentType: "application/json; charset=UTF-8", contentLength: body.count)
    }

    public static var keepsResponseBody: Bool { true }
}

/// A `POST` of an HTML form, for the OAuth 2.0 token endpoint.
public struct FormPostRequest: PushRequest, Hashable {
    public var path: String
    public var body: [UInt8]

    public init(path: String, form: String) {
        self.path = path.isEmpty ? "/" : path
        self.body = Array(form.utf8)
    }

    public func headers(authority: String, authorization: String?) -> HPACKHeaders {
        HPACKHeaders.post(path: path, authority: authority, authorization: authorization,
                          contentType: "application/x-www-form-urlencoded", contentLength: body.count)
    }

    public static var keepsResponseBody: Bool { true }
}

extension HPACKHeaders {
    /// The header block of an HTTPS `POST` with a body.
    static func post(path: String, authority: String, authorization: String?, contentType: String, contentLength: Int) -> HPACKHeaders {
        var headers = HPACKHeaders()
        headers.reserveCapacity(7)
        headers.add(name: ":method", value: "POST")
        headers.add(name: ":scheme", value: "https")
        headers.add(name: ":path", value: path)
        headers.add(name: ":authority", value: authority)
        if let authorization { headers.add(name: "authorization", value: authorization) }
        headers.add(name: "content-type", value: contentType)
        headers.add(name: "content-length", value: String(contentLength), indexing: .nonIndexable)
        return headers
    }
}

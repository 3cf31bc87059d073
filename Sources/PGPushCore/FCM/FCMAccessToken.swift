import Foundation

/// An OAuth 2.0 access token for FCM, as the token endpoint issued it.
///
/// `description` never shows the token: it is a bearer credential.
public struct FCMAccessToken: Sendable, Hashable, CustomStringConvertible {
    public let value: String
    public let expiresAt: Date
    /// `Bearer <value>`, built once rather than once per request.
    public let authorizationHeaderValue: String

    public init(value: String, expiresAt: Date) {
        self.value = value
        self.expiresAt = expiresAt
        self.authorizationHeaderValue = "Bearer \(value)"
    }

    /// Seconds left at `now`; negative once expired.
    public func remainingLifetime(at now: Date) -> TimeInterval {
        expiresAt.timeIntervalSince(now)
    }

    public var description: String {
        "FCMAccessToken(expires: \(Int64(expiresAt.timeIntervalSince1970)))"
    }

    /// Answers larger than this are not token answers (real ones are about 1 KB).
    static let maximumAnswerSize = 64 * 1024

    /// Parses the token endpoint's 200 answer `{"access_token","expires_in","token_type"}`.
    ///
    /// - Parameter receivedAt: When the answer arrived; `expires_in` counts from then.
    /// - Throws: ``PGPushError`` with ``PGPushError/Code/invalidCredential``. The message never quotes the answer.
    public static func parse(_ body: some DataProtocol, receivedAt: Date) throws(PGPushError) -> FCMAccessToken {
        guard body.count <= maximumAnswerSize, let answer = try? JSONDecoder().decode(TokenAnswer.self, from: Data(body))
        else {
            throw PGPushError(.invalidCredential, "the token endpoint's answer is not a JSON object")
        }
        guard let token = answer.accessToken, !token.isEmpty else {
            throw PGPushError(.invalidCredential, #"the token endpoint's answer has no "access_token""#)
        }
        // A header value cannot hold control characters; refusing them here keeps a bad answer out of HPACK.
        guard token.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            throw PGPushError(.invalidCredential, #"the token endpoint's "access_token" holds characters a header cannot carry"#)
        }
        guard answer.tokenType?.lowercased() == "bearer" else {
            throw PGPushError(.invalidCredential, #"the token endpoint's "token_type" is not "Bearer""#)
        }
        guard let expiresIn = answer.expiresIn, expiresIn.isFinite, expiresIn > 0 else {
            throw PGPushError(.invalidCredential, #"the token endpoint's "expires_in" is not a positive number of seconds"#)
        }
        return FCMAccessToken(value: token, expiresAt: receivedAt.addingTimeInterval(expiresIn))
    }

    /// Each field on its own, so one of the wrong type reads as missing and gets its own error message.
    private struct TokenAnswer: Decodable {
        var accessToken: String?
        var expiresIn: Double?
        var tokenType: String?

        enum CodingKeys: String, CodingKey {
            case accessToken = "access_token", expiresIn = "expires_in", tokenType = "token_type"
        }

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            accessToken = try? container.decode(String.self, forKey: .accessToken)
            expiresIn = try? container.decode(Double.self, forKey: .expiresIn)
            tokenType = try? container.decode(String.self, forKey: .tokenType)
        }
    }
}

/// When to fetch a new access token: a few minutes before the current one expires, so no request is sent
/// with a token that dies in flight.
public struct FCMAccessTokenRefreshPolicy: Sendable, Hashable {
    /// Refresh once fewer than this many seconds remain.
    public var refreshBeforeExpiry: TimeInterval

    public init(refreshBeforeExpiry: TimeInterval = 300) {
        self.refreshBeforeExpiry = refreshBeforeExpiry
    }

    public func needsRefresh(_ token: FCMAccessToken, now: Date) -> Bool {
        token.remainingLifetime(at: now) < refreshBeforeExpiry
    }
}

/// The token endpoint's refusal, `{"error","error_description"}` (RFC 6749 §5.2), made safe to log.
public struct FCMOAuthError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The OAuth error code (`invalid_grant`, …), or `HTTP<status>` when the answer had none.
    public var error: String
    /// Google's explanation, shortened and with anything token-shaped redacted.
    public var errorDescription: String?

    public init(error: String, errorDescription: String? = nil) {
        self.error = error
        self.errorDescription = errorDescription
    }

    /// Parses a non-200 answer; never fails: a missing or garbage body gives `HTTP<status>`.
    public static func parse(status: Int, body: some DataProtocol) -> FCMOAuthError {
        let object = body.count <= FCMAccessToken.maximumAnswerSize
            ? (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any] : nil
        // The code is recorded and shown; only a short identifier is trusted as one.
        let code = (object?["error"] as? String).flatMap { code in
            (1...64).contains(code.utf8.count) && code.utf8.allSatisfy(isIdentifierByte) ? code : nil
        }
        let description = (object?["error_description"] as? String).map(safeDescription)
        return FCMOAuthError(error: code ?? "HTTP\(status)", errorDescription: description)
    }

    public var description: String {
        guard let errorDescription, !errorDescription.isEmpty else { return error }
        return "\(error): \(errorDescription)"
    }

    private static func isIdentifierByte(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
            || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: "_")
            || byte == UInt8(ascii: "-") || byte == UInt8(ascii: ".")
    }

    /// One line, at most 200 characters, token-like runs redacted: a server may quote what it was sent, and
    /// words in Google's prose are far shorter than any token or assertion.
    private static func safeDescription(_ text: String) -> String {
        let oneLine = String(text.unicodeScalars.map { $0.properties.generalCategory == .control ? " " : Character($0) })
        var redacted = ""
        var run = ""
        func flush() {
            redacted += run.count >= 32 ? "[redacted]" : run
            run = ""
        }
        for character in LogRedaction.redact(oneLine) {
            if character.isASCII, character.isLetter || character.isNumber || "._-+/=~".contains(character) {
                run.append(character)
            } else {
                flush()
                redacted.append(character)
            }
        }
        flush()
        return redacted.count > 200 ? String(redacted.prefix(200)) + "…" : redacted
    }
}

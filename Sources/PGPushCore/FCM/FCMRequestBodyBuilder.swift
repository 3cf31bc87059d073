import Foundation

/// Builds `messages:send` bodies, `{"message":{"token":"…",<the job's fields>}}`, for one job's stored message.
///
/// The stored message is checked once, here; each body is then two byte copies around the escaped token,
/// so a job sent to a million tokens never re-encodes its JSON.
public struct FCMRequestBodyBuilder: Sendable, Hashable {
    /// Everything before the token's opening quote.
    private let prefix: [UInt8]
    /// Everything after the token's closing quote.
    private let suffix: [UInt8]

    /// The fields that choose the target; the stored message must hold none, the token is the target.
    static let targetFields: Set<String> = ["token", "topic", "condition"]

    /// - Parameters:
    ///   - message: The job's stored FCM message: a JSON object with `notification`, `data`, `android`, … and
    ///     no target. `{}` is allowed.
    ///   - validateOnly: Adds `"validate_only":true`: FCM checks the message without sending it.
    /// - Throws: ``PGPushError`` with ``PGPushError/Code/invalidInput`` when `message` is not a JSON object or
    ///   already names a target.
    public init(message: some DataProtocol, validateOnly: Bool = false) throws(PGPushError) {
        let bytes = Array(message)
        guard let object = (try? JSONSerialization.jsonObject(with: Data(bytes))) as? [String: Any] else {
            throw PGPushError(.invalidInput, "the stored FCM message is not a JSON object")
        }
        if let target = Self.targetFields.sorted().first(where: { object[$0] != nil }) {
            throw PGPushError(.invalidInput, "the stored FCM message already has a \"\(target)\"; pgpush adds the token")
        }
        // The object is valid JSON, so between its outer braces lies a well-formed member list (or nothing).
        guard let open = bytes.firstIndex(where: { !FCMJSONText.isWhitespace($0) }),
              let close = bytes.lastIndex(where: { !FCMJSONText.isWhitespace($0) }),
              bytes[open] == UInt8(ascii: "{"), bytes[close] == UInt8(ascii: "}"), open < close
        else {
            throw PGPushError(.invalidInput, "the stored FCM message must start with '{' and end with '}'")
        }
        let members = bytes[(open + 1)..<close].drop(while: FCMJSONText.isWhitespace)

        prefix = Array((validateOnly ? #"{"validate_only":true,"message":{"token":"# : #"{"message":{"token":"#).utf8)
        suffix = members.isEmpty ? Array("}}".utf8) : [UInt8(ascii: ",")] + members + Array("}}".utf8)
    }

    /// The body for `token`. The token is JSON-escaped, though valid ones are `[A-Za-z0-9_:-]`: a token comes
    /// from a device, and one with a quote in it must not be able to rewrite the message.
    public func body(forToken token: String) -> [UInt8] {
        var body: [UInt8] = []
        body.reserveCapacity(prefix.count + token.utf8.count + 2 + suffix.count)
        body += prefix
        FCMJSONText.appendQuoted(token, to: &body)
        body += suffix
        return body
    }
}

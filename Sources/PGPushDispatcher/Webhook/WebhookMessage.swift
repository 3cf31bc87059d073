import Crypto
import PGPushStore

/// The POST the relay sends for one event: the exact body bytes and the headers that go with them. Pure.
///
/// The body is `{"id":…,"app_id":…,"job_id":…,"at":…,"event":…,"body":{…}}` (keys in that order, no spaces
/// between them, `job_id` and `app_id` `null` when the event has none, `body` the event's jsonb as PostgreSQL
/// writes it, `{}` when it has none). The signature is the lowercase hex HMAC-SHA256 of exactly these bytes
/// with the secret: a receiver checks it over the raw body it read, before parsing it.
public struct WebhookMessage: Sendable, Hashable {
    public static let signatureHeader = "X-PGPush-Signature"
    public static let eventIDHeader = "X-PGPush-Event-Id"

    public var eventID: Int64
    public var body: [UInt8]
    /// `sha256=<lowercase hex HMAC-SHA256 of body>`.
    public var signature: String

    public init(event: WebhookEvent, secret: [UInt8]) {
        self.eventID = event.id
        self.body = Array(Self.json(event).utf8)
        self.signature = "sha256=" + Self.hmacHex(body, secret: secret)
    }

    /// Every header of the POST, in order.
    public var headers: [(String, String)] {
        [
            ("Content-Type", "application/json"),
            (Self.signatureHeader, signature),
            (Self.eventIDHeader, String(eventID)),
            ("User-Agent", "pgpush-webhook"),
        ]
    }

    /// The JSON text of an event.
    public static func json(_ event: WebhookEvent) -> String {
        var text = "{\"id\":\(event.id),\"app_id\":"
        text += event.appID.map(quoted) ?? "null"
        text += ",\"job_id\":"
        text += event.jobID.map { String($0) } ?? "null"
        text += ",\"at\":" + quoted(event.at)
        text += ",\"event\":" + quoted(event.event)
        text += ",\"body\":" + (event.body ?? "{}")
        text += "}"
        return text
    }

    /// The lowercase hex HMAC-SHA256 of `body` keyed with `secret`.
    public static func hmacHex(_ body: [UInt8], secret: [UInt8]) -> String {
        let code = HMAC<SHA256>.authenticationCode(for: body, using: SymmetricKey(data: secret))
        let digits = Array("0123456789abcdef".utf8)
        var hex: [UInt8] = []
        hex.reserveCapacity(64)
        for byte in code {
            hex.append(digits[Int(byte >> 4)])
            hex.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: hex, as: UTF8.self)
    }

    /// A JSON string literal (RFC 8259): quotes, backslashes and control characters escaped, the rest as UTF-8.
    static func quoted(_ string: String) -> String {
        var out = "\""
        for scalar in string.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case "\u{08}": out += "\\b"
            case "\u{0C}": out += "\\f"
            case let scalar where scalar.value < 0x20:
                let hex = String(scalar.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default:
                out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }
}

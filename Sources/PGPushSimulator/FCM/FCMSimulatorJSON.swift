import Foundation

/// JSON text the FCM simulator writes by hand, so its answers keep Google's key order.
enum FCMSimulatorJSON {
    /// `value` as a JSON string literal, quotes included (RFC 8259 escapes; the rest of UTF-8 unchanged).
    /// Bytes are enough: every byte of a multi-byte UTF-8 sequence is 0x80 or above, so none is escaped.
    static func quoted(_ value: String) -> String {
        let (quote, backslash) = (UInt8(ascii: "\""), UInt8(ascii: "\\"))
        // Every answer quotes a message name; almost nothing the simulator quotes needs an escape.
        guard value.utf8.contains(where: { $0 == quote || $0 == backslash || $0 < 0x20 }) else {
            return "\"" + value + "\""
        }
        var output: [UInt8] = [quote]
        output.reserveCapacity(value.utf8.count + 8)
        for byte in value.utf8 {
            switch byte {
            case quote, backslash: output += [backslash, byte]
            case UInt8(ascii: "\n"): output += [backslash, UInt8(ascii: "n")]
            case UInt8(ascii: "\r"): output += [backslash, UInt8(ascii: "r")]
            case UInt8(ascii: "\t"): output += [backslash, UInt8(ascii: "t")]
            case ..<0x20: output += Array(String(format: "\\u%04x", byte).utf8)
            default: output.append(byte)
            }
        }
        output.append(quote)
        return String(decoding: output, as: UTF8.self)
    }

    /// Compact JSON with sorted keys and unescaped slashes, or `nil` when `object` is not serialisable.
    static func serialized(_ object: Any) -> Data? {
        try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes, .fragmentsAllowed])
    }
}

/// One `google.rpc.BadRequest` field violation.
struct FCMSimulatorFieldViolation: Sendable, Hashable {
    var field: String?
    var description: String
}

/// A Google API error answer: `{"error":{"code":…,"message":…,"status":…,"details":[…]}}`.
struct FCMSimulatorError: Error, Sendable, Hashable {
    var httpStatus: Int
    /// The canonical status name: `INVALID_ARGUMENT`, `NOT_FOUND`, …
    var status: String
    var message: String
    /// The `google.firebase.fcm.v1.FcmError` detail's `errorCode`; `nil` leaves that detail out.
    var errorCode: String?
    /// The `google.rpc.BadRequest` detail's violations; empty leaves that detail out.
    var fieldViolations: [FCMSimulatorFieldViolation] = []
    var retryAfterSeconds: Int?

    /// 400 INVALID_ARGUMENT about one field, with FcmError `INVALID_ARGUMENT` and a BadRequest detail.
    static func invalidArgument(field: String?, _ description: String) -> FCMSimulatorError {
        FCMSimulatorError(httpStatus: 400, status: "INVALID_ARGUMENT", message: description,
                          errorCode: "INVALID_ARGUMENT",
                          fieldViolations: [FCMSimulatorFieldViolation(field: field, description: description)])
    }

    /// The registration token is malformed or registered nowhere: what FCM answers for a bad token.
    static let invalidToken = FCMSimulatorError(
        httpStatus: 400, status: "INVALID_ARGUMENT",
        message: "The registration token is not a valid FCM registration token",
        errorCode: "INVALID_ARGUMENT",
        fieldViolations: [FCMSimulatorFieldViolation(field: "message.token", description: "Invalid registration token")])

    /// The code the statistics count: the FcmError code, else the status.
    var statisticsCode: String { errorCode ?? status }

    var body: String {
        var json = #"{"error":{"code":\#(httpStatus),"message":"# + FCMSimulatorJSON.quoted(message)
            + #","status":"# + FCMSimulatorJSON.quoted(status)
        var details: [String] = []
        if let errorCode {
            details.append(#"{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":"#
                + FCMSimulatorJSON.quoted(errorCode) + "}")
        }
        if !fieldViolations.isEmpty {
            let violations = fieldViolations.map { violation in
                var text = "{"
                if let field = violation.field { text += #""field":"# + FCMSimulatorJSON.quoted(field) + "," }
                return text + #""description":"# + FCMSimulatorJSON.quoted(violation.description) + "}"
            }
            details.append(#"{"@type":"type.googleapis.com/google.rpc.BadRequest","fieldViolations":["#
                + violations.joined(separator: ",") + "]}")
        }
        if !details.isEmpty { json += #","details":["# + details.joined(separator: ",") + "]" }
        return json + "}}"
    }
}

import Foundation

/// JSON text the FCM simulator writes by hand, so its answers keep Google's key order.
enum FCMSimulatorJSON {
    /// `value` as a JSON string literal, quotes included (RFC 8259 escapes; the rest of UTF-8 unchanged).
    static func quoted(_ value: String) -> String {
        var output = "\""
        output.reserveCapacity(value.utf8.count + 2)
        for scalar in value.unicodeScalars {
            switch scalar {
            case "\"": output += "\\\""
            case "\\": output += "\\\\"
            case "\n": output += "\\n"
            case "\r": output += "\\r"
            case "\t": output += "\\t"
            case _ where scalar.value < 0x20:
                output += String(format: "\\u%04x", scalar.value)
            default:
                output.unicodeScalars.append(scalar)
            }
        }
        return output + "\""
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

import Foundation

/// A `messages:send` body that passed validation.
struct FCMValidatedSend: Sendable {
    var token: String
    var validateOnly: Bool
    /// The `message` object as JSON with sorted keys (empty unless asked for).
    var messageJSON: String
}

/// Checks a `messages:send` body the way FCM does, as far as pgpush relies on it. Each failure is
/// `400 INVALID_ARGUMENT` naming the field in a `google.rpc.BadRequest` detail.
///
/// - Top level: a JSON object with `message` (an object) and optionally `validate_only` (a boolean); nothing else.
/// - Target: exactly one of `token`, `topic`, `condition`; only `token` is supported. A token must be 1–4096
///   characters of `[A-Za-z0-9._:-]`, else it is answered like FCM answers a bad token (field `message.token`).
/// - `notification`: `title`, `body`, `image`, all strings.
/// - `data` (and `android.data`): string values only, no reserved key (`from`, `message_type`, `google.*`, `gcm.*`).
/// - `android`: known fields only; `priority` `NORMAL` or `HIGH` (any case, as the Admin SDKs send lowercase);
///   `ttl` a duration string (`"3600s"`, `"1.5s"`) of at most 2,419,200 s; `collapse_key` and
///   `restricted_package_name` strings; `direct_boot_ok` a boolean; `notification` an object, whose
///   `notification_count`, when present, is a JSON integer (no fraction or exponent) from 0 to 2^31-1 (int32).
/// - `fcm_options`: an object whose `analytics_label`, when present, is a string matching
///   `^[a-zA-Z0-9-_.~%]{1,50}$`.
/// - `apns`, `webpush`: objects (not looked into).
/// - `null` for `analytics_label` or `notification_count` is the field's default, as in proto3 JSON: absent.
/// - Size: the message without its target, as compact JSON, at most 4,096 bytes (field `message`).
///
/// Both spellings proto JSON allows are accepted (`collapse_key` and `collapseKey`, …).
enum FCMMessageValidator {
    static let maximumMessageBytes = 4096
    static let maximumTTLSeconds: Double = 2_419_200
    static let maximumTokenLength = 4096

    static let topLevelFields: Set<String> = ["message", "validate_only", "validateOnly"]
    static let messageFields: Set<String> = [
        "name", "data", "notification", "android", "webpush", "apns", "fcm_options", "fcmOptions",
        "token", "topic", "condition",
    ]
    static let notificationFields: Set<String> = ["title", "body", "image"]
    static let androidFields: Set<String> = [
        "collapse_key", "collapseKey", "priority", "ttl", "restricted_package_name", "restrictedPackageName",
        "data", "notification", "fcm_options", "fcmOptions", "direct_boot_ok", "directBootOk",
        "bandwidth_constrained_ok", "bandwidthConstrainedOk", "restricted_satellite_ok", "restrictedSatelliteOk",
    ]

    static func validate(_ body: Data, keepMessage: Bool) -> Result<FCMValidatedSend, FCMSimulatorError> {
        do {
            return .success(try check(body, keepMessage: keepMessage))
        } catch {
            return .failure(error)
        }
    }

    private static func check(_ body: Data, keepMessage: Bool) throws(FCMSimulatorError) -> FCMValidatedSend {
        guard let root = (try? JSONSerialization.jsonObject(with: body)) as? [String: Any] else {
            throw FCMSimulatorError(
                httpStatus: 400, status: "INVALID_ARGUMENT",
                message: "Invalid JSON payload received. The body is not a JSON object.",
                fieldViolations: [FCMSimulatorFieldViolation(
                    field: nil, description: "Invalid JSON payload received. The body is not a JSON object.")])
        }
        try rejectUnknownFields(root, known: topLevelFields, at: nil)
        var validateOnly = false
        if let value = root["validate_only"] ?? root["validateOnly"] {
            guard let flag = value as? Bool else {
                throw .invalidArgument(field: "validate_only", "Invalid value at 'validate_only' (TYPE_BOOL)")
            }
            validateOnly = flag
        }
        guard let messageValue = root["message"] else {
            throw .invalidArgument(field: "message", "The message is missing.")
        }
        guard let message = messageValue as? [String: Any] else {
            throw .invalidArgument(field: "message", "Invalid value at 'message': not an object")
        }
        try rejectUnknownFields(message, known: messageFields, at: "message")

        let token = try target(of: message)
        if let notification = message["notification"] { try checkNotification(notification, at: "message.notification") }
        if let data = message["data"] { try checkData(data, at: "message.data") }
        if let android = message["android"] { try checkAndroid(android) }
        for field in ["apns", "webpush", "fcm_options", "fcmOptions"] {
            if let value = message[field], !(value is [String: Any]) {
                throw .invalidArgument(field: "message.\(field)", "Invalid value at 'message.\(field)': not an object")
            }
        }
        for spelling in ["fcm_options", "fcmOptions"] {
            if let options = message[spelling] as? [String: Any] { try checkFCMOptions(options, at: "message.fcm_options") }
        }
        if let name = message["name"], !(name is String) {
            throw .invalidArgument(field: "message.name", "Invalid value at 'message.name' (TYPE_STRING)")
        }

        // Measured on the bytes received, less the envelope and the target, rather than by serialising the
        // message again: that cost more than everything else a send does here.
        let size = body.count - token.utf8.count - envelopeBytes
        if size > maximumMessageBytes {
            throw .invalidArgument(
                field: "message", "Message is too big: \(size) bytes, more than \(maximumMessageBytes)")
        }
        let messageJSON = keepMessage ? String(decoding: body, as: UTF8.self) : ""
        return FCMValidatedSend(token: token, validateOnly: validateOnly, messageJSON: messageJSON)
    }

    /// `{"message":` … `}` and `"token":"",` around a compact message object.
    static let envelopeBytes = #"{"message":}"#.utf8.count + #""token":"","#.utf8.count

    /// The token, after checking that it is the one and only target.
    private static func target(of message: [String: Any]) throws(FCMSimulatorError) -> String {
        let targets = ["token", "topic", "condition"].filter { message[$0] != nil && !(message[$0] is NSNull) }
        guard !targets.isEmpty else {
            throw .invalidArgument(field: "message", "Recipient of the message is not set.")
        }
        guard targets.count == 1 else {
            throw .invalidArgument(field: "message", "Exactly one of token, topic or condition may be set; got \(targets.joined(separator: ", ")).")
        }
        guard targets[0] == "token" else {
            throw .invalidArgument(field: "message.\(targets[0])", "The FCM simulator supports only token targets.")
        }
        guard let token = message["token"] as? String, isWellFormedToken(token) else {
            throw FCMSimulatorError.invalidToken
        }
        return token
    }

    static func isWellFormedToken(_ token: String) -> Bool {
        (1...maximumTokenLength).contains(token.utf8.count) && token.utf8.allSatisfy(isTokenByte)
    }

    static func isTokenByte(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
            || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: "_")
            || byte == UInt8(ascii: "-") || byte == UInt8(ascii: ":") || byte == UInt8(ascii: ".")
    }

    private static func checkNotification(_ value: Any, at path: String) throws(FCMSimulatorError) {
        guard let notification = value as? [String: Any] else {
            throw .invalidArgument(field: path, "Invalid value at '\(path)': not an object")
        }
        try rejectUnknownFields(notification, known: notificationFields, at: path)
        for key in notification.keys.sorted() where !(notification[key] is String) {
            throw .invalidArgument(field: "\(path).\(key)", "Invalid value at '\(path).\(key)' (TYPE_STRING)")
        }
    }

    private static func checkData(_ value: Any, at path: String) throws(FCMSimulatorError) {
        guard let data = value as? [String: Any] else {
            throw .invalidArgument(field: path, "Invalid value at '\(path)': not a map of strings")
        }
        for key in data.keys.sorted() {
            guard data[key] is String else {
                throw .invalidArgument(field: path, "Invalid value at '\(path)[\(key)].value' (TYPE_STRING): data values must be strings")
            }
            if isReservedDataKey(key) {
                throw .invalidArgument(field: path, "Invalid data payload key: \(key)")
            }
        }
    }

    /// `from`, `message_type`, and any key starting with `google.` or `gcm.`.
    static func isReservedDataKey(_ key: String) -> Bool {
        key == "from" || key == "message_type" || key.hasPrefix("google.") || key.hasPrefix("gcm.")
    }

    private static func checkAndroid(_ value: Any) throws(FCMSimulatorError) {
        let path = "message.android"
        guard let android = value as? [String: Any] else {
            throw .invalidArgument(field: path, "Invalid value at '\(path)': not an object")
        }
        try rejectUnknownFields(android, known: androidFields, at: path)
        if let priority = android["priority"] {
            guard let text = priority as? String, ["NORMAL", "HIGH"].contains(text.uppercased()) else {
                throw .invalidArgument(field: "\(path).priority",
                                       "Invalid value at '\(path).priority': must be NORMAL or HIGH")
            }
        }
        if let ttl = android["ttl"] {
            guard let text = ttl as? String, let seconds = durationSeconds(text) else {
                throw .invalidArgument(field: "\(path).ttl",
                                       "Invalid value at '\(path).ttl' (type.googleapis.com/google.protobuf.Duration)")
            }
            guard seconds <= maximumTTLSeconds else {
                throw .invalidArgument(field: "\(path).ttl", "The TTL is longer than 4 weeks (2419200s)")
            }
        }
        for (snake, camel) in [("collapse_key", "collapseKey"), ("restricted_package_name", "restrictedPackageName")] {
            if let value = android[snake] ?? android[camel], !(value is String) {
                throw .invalidArgument(field: "\(path).\(snake)", "Invalid value at '\(path).\(snake)' (TYPE_STRING)")
            }
        }
        for (snake, camel) in [("direct_boot_ok", "directBootOk"), ("bandwidth_constrained_ok", "bandwidthConstrainedOk"),
                               ("restricted_satellite_ok", "restrictedSatelliteOk")] {
            if let value = android[snake] ?? android[camel], !(value is Bool) {
                throw .invalidArgument(field: "\(path).\(snake)", "Invalid value at '\(path).\(snake)' (TYPE_BOOL)")
            }
        }
        if let data = android["data"] { try checkData(data, at: "\(path).data") }
        for (snake, camel) in [("notification", "notification"), ("fcm_options", "fcmOptions")] {
            if let value = android[snake] ?? android[camel], !(value is [String: Any]) {
                throw .invalidArgument(field: "\(path).\(snake)", "Invalid value at '\(path).\(snake)': not an object")
            }
        }
        if let notification = android["notification"] as? [String: Any] {
            try checkAndroidNotification(notification, at: "\(path).notification")
        }
    }

    /// `notification_count` (`notificationCount`): the int32 badge count a device shows, not negative.
    private static func checkAndroidNotification(_ notification: [String: Any], at path: String) throws(FCMSimulatorError) {
        let field = "\(path).notification_count"
        for spelling in ["notification_count", "notificationCount"] {
            guard let value = notification[spelling], !(value is NSNull) else { continue }
            guard let count = jsonInteger(value) else {
                throw .invalidArgument(field: field, "Invalid value at '\(field)' (TYPE_INT32), \(value)")
            }
            guard count >= 0 else {
                throw .invalidArgument(field: field, "Invalid value at '\(field)': notification_count must not be negative")
            }
            guard count <= Int64(Int32.max) else {
                throw .invalidArgument(field: field, "Invalid value at '\(field)' (TYPE_INT32), \(count): out of range")
            }
        }
    }

    /// The value of a JSON number written without fraction or exponent; `nil` for anything else. Booleans are
    /// `NSNumber`s too (type `c`), and `1.0`, `1e2` or numbers beyond 64 bits parse as doubles or decimals.
    static func jsonInteger(_ value: Any) -> Int64? {
        guard let number = value as? NSNumber else { return nil }
        switch String(cString: number.objCType) {
        case "i", "s", "l", "q": return number.int64Value
        case "I", "S", "L", "Q": return number.uint64Value <= UInt64(Int64.max) ? Int64(number.uint64Value) : nil
        default: return nil
        }
    }

    static let maximumAnalyticsLabelLength = 50

    /// `analytics_label` (`analyticsLabel`) of `message.fcm_options`: `^[a-zA-Z0-9-_.~%]{1,50}$`.
    private static func checkFCMOptions(_ options: [String: Any], at path: String) throws(FCMSimulatorError) {
        let field = "\(path).analytics_label"
        for spelling in ["analytics_label", "analyticsLabel"] {
            guard let value = options[spelling], !(value is NSNull) else { continue }
            guard let label = value as? String, isValidAnalyticsLabel(label) else {
                throw .invalidArgument(
                    field: field, "Invalid value at '\(field)': the analytics label must match ^[a-zA-Z0-9-_.~%]{1,50}$")
            }
        }
    }

    static func isValidAnalyticsLabel(_ label: String) -> Bool {
        (1...maximumAnalyticsLabelLength).contains(label.utf8.count) && label.utf8.allSatisfy { byte in
            (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
                || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: "-")
                || byte == UInt8(ascii: "_") || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "~")
                || byte == UInt8(ascii: "%")
        }
    }

    /// Seconds of a protobuf Duration in JSON: digits, optionally `.` and 1–9 digits, then `s`.
    static func durationSeconds(_ text: String) -> Double? {
        guard text.hasSuffix("s") else { return nil }
        let number = text.dropLast()
        let parts = number.split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false)
        guard let whole = parts.first, !whole.isEmpty, whole.count <= 12, whole.allSatisfy(\.isASCIIDigit) else { return nil }
        if parts.count == 2 {
            guard (1...9).contains(parts[1].count), parts[1].allSatisfy(\.isASCIIDigit) else { return nil }
        }
        return Double(number)
    }

    private static func rejectUnknownFields(_ object: [String: Any], known: Set<String>, at path: String?) throws(FCMSimulatorError) {
        guard let unknown = object.keys.filter({ !known.contains($0) }).sorted().first else { return }
        let field = path.map { "\($0).\(unknown)" } ?? unknown
        let place = path.map { " at '\($0)'" } ?? ""
        throw .invalidArgument(field: field, "Invalid JSON payload received. Unknown name \"\(unknown)\"\(place): Cannot find field.")
    }
}

extension Character {
    fileprivate var isASCIIDigit: Bool { isASCII && isNumber }
}

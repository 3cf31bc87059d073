import Foundation
import PGPushCore
import PGPushStore

/// Reading a job file into `push.enqueue`'s arguments.
extension EnqueueRequest {
    /// The keys a job file may contain: `push.enqueue`'s parameter names.
    static let fileKeys: Set<String> = [
        "app_id", "payload", "push_type", "apns_priority", "tokens", "user_ids", "tags", "send_at", "expires_at",
        "collapse_id", "idempotency_key", "priority", "fcm", "activity_ids", "activity_type", "channel", "localized",
        "badge", "web", "web_urgency", "max_rate", "spread_over", "local_time", "respect_quiet_hours", "category",
    ]

    /// Reads a job file: one JSON object whose keys are `push.enqueue`'s parameters. `payload`, `fcm`, `web` and
    /// `localized` may be JSON objects or strings holding one; `payload`, `fcm` or `web` is required.
    static func load(jobFile data: Data, name: String) throws -> EnqueueRequest {
        func fail(_ message: String) -> OperatorError { OperatorError(.failed, "\(name): \(message)") }
        guard let object = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any] else {
            throw fail("not a JSON object")
        }
        if let unknown = object.keys.filter({ !fileKeys.contains($0) }).sorted().first {
            throw fail("unknown key \"\(unknown)\" (expected one of: \(fileKeys.sorted().joined(separator: ", ")))")
        }
        func string(_ key: String) throws -> String? {
            guard let value = object[key], !(value is NSNull) else { return nil }
            guard let text = value as? String else { throw fail("\(key) must be a string") }
            return text
        }
        func strings(_ key: String) throws -> [String]? {
            guard let value = object[key], !(value is NSNull) else { return nil }
            guard let list = value as? [String] else { throw fail("\(key) must be a list of strings") }
            return list
        }
        func integer(_ key: String) throws -> Int32? {
            guard let value = object[key], !(value is NSNull) else { return nil }
            guard let number = value as? NSNumber, let exact = Int32(exactly: number.doubleValue)
            else { throw fail("\(key) must be an integer") }
            return exact
        }
        func boolean(_ key: String) throws -> Bool? {
            guard let value = object[key], !(value is NSNull) else { return nil }
            // JSONSerialization gives true and false as NSNumbers whose type is char ("c"); 1 and 0 are ints.
            guard let number = value as? NSNumber, String(cString: number.objCType) == "c" else {
                throw fail("\(key) must be true or false")
            }
            return number.boolValue
        }
        func date(_ key: String) throws -> Date? {
            guard let text = try string(key) else { return nil }
            guard let date = Timestamp.parse(text) else { throw fail("\(key) is not an ISO 8601 time: \(text)") }
            return date
        }
        guard let appID = try string("app_id") else { throw fail("app_id is required") }
        func json(_ key: String) throws -> String? {
            switch object[key] {
            case let text as String:
                return text
            case let value? where !(value is NSNull):
                return String(decoding: try JSONSerialization.data(withJSONObject: value, options: [.sortedKeys]), as: UTF8.self)
            default:
                return nil
            }
        }
        let payload = try json("payload")
        let fcm = try json("fcm")
        let localized = try json("localized").map { try checkLocalized($0, source: "\(name): ") }
        let web = try json("web").map { try checkWeb($0, source: "\(name): ") }
        guard payload != nil || fcm != nil || web != nil else {
            throw fail("payload is required (or fcm for an Android-only app, web for a Web-only app)")
        }
        let webUrgency = try string("web_urgency")
        if let webUrgency, WebPushUrgency(rawValue: webUrgency) == nil {
            throw fail("web_urgency must be one of \(WebPushUrgency.allCases.map(\.rawValue).joined(separator: ", ")): \(webUrgency)")
        }
        let localTime = try string("local_time")
        if let localTime, !isLocalTime(localTime) {
            throw fail("local_time must be a time of day as HH:MM, 24-hour, such as \"09:00\": \(localTime)")
        }
        return EnqueueRequest(
            appID: appID, payload: payload, pushType: try string("push_type"), apnsPriority: try integer("apns_priority"),
            tokens: try strings("tokens"), userIDs: try strings("user_ids"), tags: try strings("tags"),
            sendAt: try date("send_at"), expiresAt: try date("expires_at"), ttlSeconds: nil,
            collapseID: try string("collapse_id"), idempotencyKey: try string("idempotency_key"),
            priority: try integer("priority"), fcm: fcm, activityIDs: try strings("activity_ids"),
            activityType: try string("activity_type"), channel: try string("channel"), localized: localized,
            badge: try string("badge"), web: web, webUrgency: webUrgency, maxRate: try integer("max_rate"),
            spreadOver: try string("spread_over"), localTime: localTime, respectQuietHours: try boolean("respect_quiet_hours"),
            category: try string("category"))
    }

    /// The Web Push message as given, once it parses as JSON; as for ``checkLocalized(_:source:)``, the database
    /// judges what it means (and its size) and names the field.
    static func checkWeb(_ text: String, source: String = "") throws -> String {
        guard (try? JSONSerialization.jsonObject(with: Data(text.utf8), options: [.fragmentsAllowed])) != nil else {
            throw OperatorError(.failed, #"\#(source)web is not valid JSON: give the message the site's service worker receives, such as {"title": "Goal!", "body": "2-1"}"#)
        }
        return text
    }

    /// Locale variants as given, once they parse as JSON. PostgreSQL's own message for malformed JSON does not
    /// say which argument it was, so this one is caught here and named; what the text means (an object,
    /// locale keys, the merged payloads) is left to the database, which names the field too.
    static func checkLocalized(_ text: String, source: String = "") throws -> String {
        guard (try? JSONSerialization.jsonObject(with: Data(text.utf8), options: [.fragmentsAllowed])) != nil else {
            throw OperatorError(.failed, #"\#(source)localized is not valid JSON: give an object from locale to partial payload, such as {"fr": {"aps": {"alert": "Bonjour"}}}"#)
        }
        return text
    }
}

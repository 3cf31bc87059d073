import Foundation

/// One entry of a `google.rpc.BadRequest` detail: which field of the request was wrong.
public struct FCMFieldViolation: Sendable, Hashable {
    public var field: String
    public var description: String?

    public init(field: String, description: String? = nil) {
        self.field = field
        self.description = description
    }
}

/// An HTTP answer FCM sent for one `messages:send` request, reduced to what classification needs.
public struct FCMResponse: Sendable, Hashable {
    /// The `:status` pseudo-header.
    public var status: Int
    /// `errorCode` of the `google.firebase.fcm.v1.FcmError` detail (`UNREGISTERED`, …).
    public var errorCode: String?
    /// `error.status`, the canonical gRPC status name (`NOT_FOUND`, `UNAUTHENTICATED`, …).
    public var errorStatus: String?
    /// `error.message`: Google's prose. Used to recognise a bad token; never recorded as a reason.
    public var errorMessage: String?
    /// The `google.rpc.BadRequest` detail's violations.
    public var fieldViolations: [FCMFieldViolation]
    /// From the `Retry-After` header.
    public var retryAfter: Duration?
    /// `name` of a 200 answer: `projects/{project_id}/messages/{message_id}`.
    public var messageName: String?

    public init(
        status: Int,
        errorCode: String? = nil,
        errorStatus: String? = nil,
        errorMessage: String? = nil,
        fieldViolations: [FCMFieldViolation] = [],
        retryAfter: Duration? = nil,
        messageName: String? = nil
    ) {
        self.status = status
        self.errorCode = errorCode
        self.errorStatus = errorStatus
        self.errorMessage = errorMessage
        self.fieldViolations = fieldViolations
        self.retryAfter = retryAfter
        self.messageName = messageName
    }

    static let fcmErrorType = "type.googleapis.com/google.firebase.fcm.v1.FcmError"
    static let badRequestType = "type.googleapis.com/google.rpc.BadRequest"
    /// Google's error bodies are well under this; a larger one is not read.
    static let maximumBodySize = 64 * 1024

    /// Parses an answer. Never fails: a missing, oversized or garbage body leaves the error fields `nil`, and
    /// codes that are not short upper-case identifiers are ignored rather than recorded.
    ///
    /// - Parameters:
    ///   - body: The response body; empty when there was none.
    ///   - retryAfter: The `Retry-After` header's value, if any.
    ///   - now: The time the answer arrived, for a `Retry-After` given as an HTTP-date.
    public init(status: Int, body: some DataProtocol, retryAfter: String?, now: Date) {
        self.init(status: status, retryAfter: retryAfter.flatMap { FCMRetryAfter.parse($0, now: now) })
        guard !body.isEmpty, body.count <= Self.maximumBodySize,
              let object = (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any]
        else { return }
        messageName = object["name"] as? String
        guard let error = object["error"] as? [String: Any] else { return }
        errorStatus = Self.identifier(error["status"])
        errorMessage = error["message"] as? String
        for detail in error["details"] as? [[String: Any]] ?? [] {
            switch detail["@type"] as? String {
            case Self.fcmErrorType?:
                errorCode = errorCode ?? Self.identifier(detail["errorCode"])
            case Self.badRequestType?:
                for violation in detail["fieldViolations"] as? [[String: Any]] ?? [] {
                    guard let field = violation["field"] as? String else { continue }
                    fieldViolations.append(FCMFieldViolation(field: field, description: violation["description"] as? String))
                }
            default:
                continue
            }
        }
    }

    /// A code is recorded as the delivery's reason, so only a plausible one (`[A-Z0-9_]`, 1–64) counts.
    private static func identifier(_ value: Any?) -> String? {
        guard let text = value as? String, (1...64).contains(text.utf8.count),
              text.utf8.allSatisfy({ (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains($0)
                  || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) || $0 == UInt8(ascii: "_") })
        else { return nil }
        return text
    }
}

/// The `Retry-After` header (RFC 9110 §10.2.3): delta-seconds or an HTTP-date.
public enum FCMRetryAfter {
    /// The wait it asks for, or `nil` when the value is neither form. A date in the past means no wait.
    public static func parse(_ value: String, now: Date) -> Duration? {
        let text = value.trimmingCharacters(in: .whitespaces)
        if isDigits(text) {
            // A number too large for Int64 is still a request to wait a very long time.
            return .seconds(Int64(text) ?? Int64.max)
        }
        guard let date = httpDate(text) else { return nil }
        let seconds = max(0, date.timeIntervalSince(now).rounded(.up))
        return .seconds(Int64(seconds))
    }

    /// IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), the only form RFC 9110 lets senders generate.
    private static func httpDate(_ text: String) -> Date? {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "GMT")!
        let parts = text.split(separator: " ")
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        guard parts.count == 6, parts[0].count == 4, parts[0].hasSuffix(","), parts[5] == "GMT",
              parts[1].count == 2, isDigits(parts[1]), let day = Int(parts[1]),
              let month = months.firstIndex(of: String(parts[2])),
              parts[3].count == 4, isDigits(parts[3]), let year = Int(parts[3])
        else { return nil }
        let time = parts[4].split(separator: ":")
        guard time.count == 3, time.allSatisfy({ $0.count == 2 && isDigits($0) }),
              let hour = Int(time[0]), let minute = Int(time[1]), let second = Int(time[2]),
              (1...31).contains(day), (0...23).contains(hour), (0...59).contains(minute), (0...60).contains(second)
        else { return nil }
        let components = DateComponents(year: year, month: month + 1, day: day, hour: hour, minute: minute, second: second)
        guard let date = calendar.date(from: components),
              calendar.component(.day, from: date) == day  // refuses 31 Feb rather than rolling over
        else { return nil }
        return date
    }

    private static func isDigits(_ text: some StringProtocol) -> Bool {
        !text.isEmpty && text.utf8.allSatisfy { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }
    }
}

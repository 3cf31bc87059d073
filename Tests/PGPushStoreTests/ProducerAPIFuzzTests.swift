import Foundation
import PGPushCore
import PGPushStore
import PGPushTestSupport
import PostgresNIO
import Testing

/// Generated hostile input through the producer's SQL API: every call either makes a valid row or fails with an
/// error that names the field, and a failed call leaves nothing behind. The seed is printed; set
/// PGPUSH_FUZZ_SEED to replay a run. The calls run on one dedicated connection, as a producer's would.
///
/// Text never contains NUL: PostgreSQL refuses it in any text value before a function runs ("invalid byte
/// sequence for encoding UTF8: 0x00"), so no API could name a field for it.
@Suite(.database, .timeLimit(.minutes(3)))
struct ProducerAPIFuzzTests {
    static let enqueueFields = ["app_id", "payload", "push_type", "apns_priority", "tokens", "user_ids", "tags", "send_at",
                                "expires_at", "collapse_id", "idempotency_key", "priority", "aps"]
    static let registerFields = ["app_id", "token", "user_id", "tags", "replaces"]

    /// Whether a failed call's error names one of `fields`: in PostgreSQL's COLUMN field or in its message.
    static func namesAField(_ error: any Error, _ fields: [String]) -> (Bool, String) {
        guard let error = error as? PSQLError, let message = error.serverInfo?[.message] else { return (false, "\(error)") }
        let column = error.serverInfo?[.columnName] ?? ""
        return (fields.contains(column) || fields.contains { message.contains($0) }, message)
    }

    @Test func tenThousandHostileCallsMakeValidRowsOrNameTheFieldAndLeaveNothingBehind() async throws {
        print("ProducerAPIFuzzTests seed \(HostileInputTests.seed)")
        try await TestDatabase.with { db in
            var random = HostileRandom(seed: HostileInputTests.seed &+ 3)
            try await db.createApp("app")
            try await db.exec("SELECT push.register_device('app', \(TestTokens.token(1)), user_id => 'u1', tags => '{t}')")
            let connection = try await db.connect(as: db.url.username)
            defer { Task { try? await connection.close() } }
            let started = ContinuousClock.now
            var made = Set<Int64>(), refused = 0, unnamed: [String] = []
            for _ in 0..<7_000 {
                let call = EnqueueCall.random(&random)
                do {
                    let rows = try await connection.query(call.query, logger: db.logger).collect()
                    made.insert(try #require(try rows.first?.decode(Int64?.self)))
                } catch {
                    refused += 1
                    let (named, message) = Self.namesAField(error, Self.enqueueFields)
                    if !named, unnamed.count < 10 { unnamed.append("\(message) ← \(call)") }
                }
            }
            #expect(unnamed.isEmpty, "errors that name no field:\n\(unnamed.joined(separator: "\n"))")
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs") == Int64(made.count), "a refused call left a job")
            #expect(try await db.scalar("SELECT count(*) FROM push.chunks") == 0)
            // What was accepted is valid by the rules the worker relies on.
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.jobs
                 WHERE jsonb_typeof(payload) <> 'object' OR jsonb_typeof(payload -> 'aps') <> 'object'
                    OR push_type NOT IN ('alert', 'background', 'location', 'voip', 'complication', 'fileprovider', 'mdm',
                                         'liveactivity', 'pushtotalk', 'widgets')
                    OR (apns_priority IS NOT NULL AND apns_priority NOT IN (10, 5, 1))
                    OR octet_length(collapse_id) > 64 OR num_nonnulls(tokens, user_ids, tags) > 1
                    OR array_position(tokens, NULL) IS NOT NULL OR cardinality(tokens) = 0
                """) == 0)
            print("enqueue: 7000 calls, \(made.count) jobs, \(refused) refused, \(ContinuousClock.now - started)")

            let registering = ContinuousClock.now
            var registered = 0
            unnamed = []
            for _ in 0..<3_000 {
                let call = RegisterCall.random(&random)
                do {
                    _ = try await connection.query(call.query, logger: db.logger).collect()
                    registered += 1
                } catch {
                    let (named, message) = Self.namesAField(error, Self.registerFields)
                    if !named, unnamed.count < 10 { unnamed.append("\(message) ← \(call)") }
                }
            }
            #expect(unnamed.isEmpty, "errors that name no field:\n\(unnamed.joined(separator: "\n"))")
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.devices
                 WHERE token !~ '^[0-9a-f]{64,200}$' OR tags IS NULL OR array_position(tags, NULL) IS NOT NULL
                """) == 0)
            print("register_device: 3000 calls, \(registered) accepted, \(ContinuousClock.now - registering)")
        }
    }
}

/// One generated push.enqueue call; every value is bound as a parameter.
struct EnqueueCall: CustomStringConvertible {
    var app: String?
    var payload: String?
    var pushType: String??
    var apnsPriority: Int32?
    var tokens: String?
    var userIDs: String?
    var tags: String?
    var sendAt: Date??
    var expiresAt: Date?
    var collapseID: String?
    var idempotencyKey: String?
    var priority: Int32??

    var query: PostgresQuery {
        // A default left out differs from NULL given explicitly; both are tried.
        var sql = "SELECT push.enqueue($1::text, $2::jsonb"
        var bindings = PostgresBindings()
        bindings.append(app)
        bindings.append(payload)
        func add<Value: PostgresNonThrowingEncodable>(_ name: String, _ value: Value?, cast: String) {
            bindings.append(value)
            sql += ", \(name) => $\(bindings.count)::\(cast)"
        }
        if let pushType { add("push_type", pushType, cast: "text") }
        if let apnsPriority { add("apns_priority", apnsPriority, cast: "int4") }
        if let tokens { add("tokens", tokens, cast: "text[]") }
        if let userIDs { add("user_ids", userIDs, cast: "text[]") }
        if let tags { add("tags", tags, cast: "text[]") }
        if let sendAt { add("send_at", sendAt, cast: "timestamptz") }
        if let expiresAt { add("expires_at", expiresAt, cast: "timestamptz") }
        if let collapseID { add("collapse_id", collapseID, cast: "text") }
        if let idempotencyKey { add("idempotency_key", idempotencyKey, cast: "text") }
        if let priority { add("priority", priority, cast: "int4") }
        return PostgresQuery(unsafeSQL: sql + ")", binds: bindings)
    }

    var description: String {
        "enqueue(app: \(app ?? "NULL"), payload: \(payload?.prefix(80) ?? "NULL"), push_type: \(String(describing: pushType)), "
            + "apns_priority: \(String(describing: apnsPriority)), tokens: \(tokens?.prefix(80) ?? "-"), user_ids: \(userIDs?.prefix(80) ?? "-"), "
            + "tags: \(tags?.prefix(80) ?? "-"), send_at: \(String(describing: sendAt)), expires_at: \(String(describing: expiresAt)), "
            + "collapse_id: \(collapseID?.prefix(40) ?? "-"), priority: \(String(describing: priority)))"
    }

    static func random(_ r: inout HostileRandom) -> EnqueueCall {
        var call = EnqueueCall()
        call.app = r.pick(["app", "app", "app", "app", "missing", "", "APP", "app'; DROP TABLE push.jobs; --", nil])
        call.payload = r.payload()
        if r.chance(0.4) {
            call.pushType = .some(r.pick(["alert", "background", "voip", "liveactivity", "widgets", "ALERT", "", "bogus", nil,
                                          String(repeating: "x", count: 500)]))
        }
        if r.chance(0.3) { call.apnsPriority = r.pick([10, 5, 1, 0, -1, 11, Int32.max, Int32.min]) }
        switch r.int(in: 0...5) {
        case 0: call.tokens = r.textArray(elements: { $0.tokenLike() })
        case 1: call.userIDs = r.textArray(elements: { $0.text(maximumLength: 40, alphabet: .unicode) })
        case 2: call.tags = r.textArray(elements: { $0.text(maximumLength: 20, alphabet: .unicode) })
        case 3:
            call.userIDs = r.textArray(elements: { $0.text(maximumLength: 8, alphabet: .printable) })
            call.tags = r.textArray(elements: { $0.text(maximumLength: 8, alphabet: .printable) })
        default: break
        }
        if r.chance(0.3) { call.sendAt = .some(r.chance(0.1) ? nil : r.date()) }
        if r.chance(0.3) { call.expiresAt = r.date() }
        if r.chance(0.3) { call.collapseID = r.text(maximumLength: 80, alphabet: .unicode) }
        if r.chance(0.3) { call.idempotencyKey = r.text(maximumLength: 300, alphabet: .unicode) }
        if r.chance(0.3) { call.priority = .some(r.chance(0.1) ? nil : r.pick([0, 10, -5, Int32.max, Int32.min, 3])) }
        return call
    }
}

/// One generated push.register_device call.
struct RegisterCall: CustomStringConvertible {
    var app: String?
    var token: String?
    var userID: String?
    var tags: String??
    var replaces: String?

    var query: PostgresQuery {
        var bindings = PostgresBindings()
        bindings.append(app)
        bindings.append(token)
        bindings.append(userID)
        bindings.append(replaces)
        var sql = "SELECT push.register_device($1::text, $2::text, user_id => $3::text, replaces => $4::text"
        if let tags {
            bindings.append(tags)
            sql += ", tags => $5::text[]"
        }
        return PostgresQuery(unsafeSQL: sql + ")", binds: bindings)
    }

    var description: String {
        "register_device(app: \(app ?? "NULL"), token: \(token?.prefix(80) ?? "NULL"), user_id: \(userID?.prefix(40) ?? "NULL"), "
            + "tags: \(String(describing: tags)), replaces: \(replaces?.prefix(80) ?? "NULL"))"
    }

    static func random(_ r: inout HostileRandom) -> RegisterCall {
        var call = RegisterCall()
        call.app = r.pick(["app", "app", "app", "missing", nil, ""])
        call.token = r.chance(0.05) ? nil : r.tokenLike()
        if r.chance(0.5) { call.userID = r.text(maximumLength: 60, alphabet: .unicode) }
        if r.chance(0.5) { call.tags = .some(r.chance(0.1) ? nil : r.textArray(elements: { $0.text(maximumLength: 20, alphabet: .unicode) })) }
        if r.chance(0.2) { call.replaces = r.tokenLike() }
        return call
    }
}

extension HostileRandom {
    /// Device-token shaped and not: hex of every length around the valid range, either case, with stray characters.
    mutating func tokenLike() -> String {
        let hex = Array("0123456789abcdefABCDEF")
        let length = pick([64, 64, 64, 100, 200, 0, 1, 63, 65, 201, 1000])
        var token = String((0..<length).map { _ in hex[int(in: 0...(hex.count - 1))] })
        if chance(0.2), !token.isEmpty {
            var characters = Array(token)
            characters[int(in: 0...(characters.count - 1))] = pick(["g", " ", "é", "-", "'", "\"", "\\", "{", ","])
            token = String(characters)
        }
        return token
    }

    /// A PostgreSQL array literal, quoted correctly, whose elements may be NULL; sometimes empty, sometimes huge.
    mutating func textArray(elements: (inout HostileRandom) -> String) -> String {
        let huge = chance(0.01)
        let count = huge ? int(in: 1000...3000) : int(in: 0...5)
        let items = (0..<count).map { _ -> String in
            if chance(0.1) { return "NULL" }
            let value = huge ? text(maximumLength: 8, alphabet: .printable) : elements(&self)
            // Escaped per scalar: `"` followed by a zero-width joiner is one Character, which String-level
            // replacement would miss.
            var escaped = String.UnicodeScalarView()
            for scalar in value.unicodeScalars {
                if scalar == "\\" || scalar == "\"" { escaped.append("\\") }
                escaped.append(scalar)
            }
            return "\"" + String(escaped) + "\""
        }
        return "{" + items.joined(separator: ",") + "}"
    }

    /// Valid JSON of every shape: APNs payloads good and bad, other JSON types, deep nesting, huge strings.
    mutating func payload() -> String? {
        switch int(in: 0...9) {
        case 0: return nil
        case 1: return pick(["null", "[]", "42", "\"aps\"", "{}", "true"])
        case 2: return #"{"aps":"not a dictionary"}"#
        case 3: return "{\"aps\":{\"alert\":\(jsonString(text(maximumLength: 6000, alphabet: .unicode)))}}"
        case 4:
            let extra = (0..<int(in: 0...50)).map { "\"k\($0)\":\(jsonString(text(maximumLength: 100, alphabet: .unicode)))" }
            return "{" + (["\"aps\":{}"] + extra).joined(separator: ",") + "}"
        case 5: return "{\"aps\":{\"content-available\":1},\"deep\":" + String(repeating: "[", count: 200) + String(repeating: "]", count: 200) + "}"
        default:
            return "{\"aps\":{\"alert\":{\"title\":\(jsonString(text(maximumLength: 60, alphabet: .unicode))),"
                + "\"body\":\(jsonString(text(maximumLength: 200, alphabet: .unicode)))}}}"
        }
    }

    func jsonString(_ text: String) -> String {
        let data = try! JSONSerialization.data(withJSONObject: [text], options: [.fragmentsAllowed])
        return String(decoding: data.dropFirst().dropLast(), as: UTF8.self)
    }

    mutating func date() -> Date {
        let now = Date().timeIntervalSince1970
        return Date(timeIntervalSince1970: pick([now - 86_400 * 365 * 50, now - 60, now + 60, now + 3600, now + 86_400 * 365 * 200, 0]))
    }
}

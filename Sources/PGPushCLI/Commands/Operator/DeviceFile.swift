import ArgumentParser
import Foundation
import PGPushCore
import PGPushStore

/// The layouts `pgpush devices import` reads.
enum DeviceFileFormat: String, ExpressibleByArgument, CaseIterable, Sendable {
    /// One token per line; blank lines and lines starting with `#` are skipped.
    case lines
    /// Comma-separated with a header naming the columns: `token` and optionally `user_id`, `tags`, `platform`,
    /// `locale`, `timezone`.
    /// Fields may be double-quoted (RFC 4180), so a field can hold a comma, a quote or a line break.
    case csv
    /// Tab-separated with the same header; no quoting.
    case tsv
    /// Web Push subscriptions, one JSON object per line: the browser's `subscription.toJSON()` itself, or
    /// `{"subscription": {…}, "user_id": …, "tags": […], "locale": …, "timezone": …}`.
    case jsonl

    /// `.csv` → csv, `.tsv`/`.tab` → tsv, `.jsonl`/`.ndjson` → jsonl, anything else (and stdin) → lines.
    static func guess(path: String) -> DeviceFileFormat {
        switch URL(fileURLWithPath: path).pathExtension.lowercased() {
        case "csv": .csv
        case "tsv", "tab": .tsv
        case "jsonl", "ndjson": .jsonl
        default: .lines
        }
    }
}

extension DevicePlatform: ExpressibleByArgument {
    /// Only the platforms a device file can hold (`devices import --platform`).
    public static var allValueStrings: [String] { DeviceFile.importable.map(\.rawValue) }
}

/// A parsed device file: its records and which optional columns it has (a column the file does not have
/// leaves the stored value alone on re-import).
struct DeviceFile: Sendable {
    var records: [DeviceRecord]
    var hasUserIDs: Bool
    var hasTags: Bool

    /// Parses the whole file, or throws naming the first bad line; nothing is partially accepted.
    /// `platform` applies to every line, except where a csv or tsv file has a `platform` column.
    static func parse(_ text: String, format: DeviceFileFormat, platform: DevicePlatform = .ios) throws(OperatorError) -> DeviceFile {
        let text = text.hasPrefix("\u{FEFF}") ? String(text.dropFirst()) : text
        switch format {
        case .lines:
            var records: [DeviceRecord] = []
            for (index, raw) in text.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline).enumerated() {
                let field = raw.trimmingCharacters(in: .whitespacesAndNewlines)
                if field.isEmpty || field.hasPrefix("#") { continue }
                records.append(DeviceRecord(
                    line: index + 1, token: try token(field, platform: platform, line: index + 1), userID: nil, tags: [],
                    platform: platform))
            }
            return DeviceFile(records: records, hasUserIDs: false, hasTags: false)
        case .csv:
            return try table(try CSVReader.records(text), format: format, platform: platform)
        case .tsv:
            let rows = text.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline).enumerated().map { index, line in
                (line: index + 1, fields: line.split(separator: "\t", omittingEmptySubsequences: false).map {
                    String($0).trimmingCharacters(in: CharacterSet(charactersIn: "\r"))
                })
            }
            return try table(rows, format: format, platform: platform)
        case .jsonl:
            return try subscriptions(text)
        }
    }

    /// A jsonl file of Web Push subscriptions. Each is checked as `devices add --subscription` checks one
    /// (WebPushSubscription: an https endpoint, a P-256 p256dh, a 16-byte auth); its keys are stored as base64url
    /// without padding, as push.register_device stores them. As with a csv column, a file where some line has
    /// `user_id` (or `tags`) sets it on every device it imports, `null` where a line has none.
    private static func subscriptions(_ text: String) throws(OperatorError) -> DeviceFile {
        var records: [DeviceRecord] = []
        var hasUserIDs = false
        var hasTags = false
        for (index, raw) in text.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline).enumerated() {
            let line = index + 1
            let field = raw.trimmingCharacters(in: .whitespacesAndNewlines)
            if field.isEmpty { continue }
            func fail(_ reason: String) -> OperatorError {
                OperatorError(.failed, "line \(line): \(reason); nothing was imported")
            }
            guard let object = (try? JSONSerialization.jsonObject(with: Data(field.utf8))) as? [String: Any] else {
                throw fail("not a JSON object (expected a subscription, or {\"subscription\": {…}, \"user_id\": …, \"tags\": […]})")
            }
            let wrapped = object["endpoint"] == nil
            if wrapped, let unknown = object.keys.filter({ !["subscription", "user_id", "tags", "locale", "timezone"].contains($0) }).sorted().first {
                throw fail("unknown key \"\(unknown.prefix(32))\" (expected subscription, user_id, tags, locale, timezone)")
            }
            let subscriptionObject = wrapped ? object["subscription"] : object
            guard let subscriptionObject, let json = try? JSONSerialization.data(withJSONObject: subscriptionObject) else {
                throw fail("no subscription: give the browser's subscription.toJSON() or {\"subscription\": {…}}")
            }
            let subscription: WebPushSubscription
            do throws(WebPushError) {
                subscription = try WebPushSubscription(json: json)
            } catch {
                throw fail("not a Web Push subscription: \(error.message)")
            }
            var userID: String?
            var tags: [String] = []
            var locale: String?
            var timezone: String?
            if wrapped {
                switch object["user_id"] {
                case nil, is NSNull: break
                case let text as String: userID = text.isEmpty ? nil : text
                default: throw fail("user_id must be a string")
                }
                switch object["tags"] {
                case nil, is NSNull: break
                case let list as [String]: tags = Self.tags(list.joined(separator: "|"))
                case let text as String: tags = Self.tags(text)
                default: throw fail("tags must be a list of strings")
                }
                switch object["locale"] {
                case nil, is NSNull: break
                case let text as String: locale = try Self.locale(text, line: line)
                default: throw fail("locale must be a string")
                }
                switch object["timezone"] {
                case nil, is NSNull: break
                case let text as String: timezone = Self.timezone(text)
                default: throw fail("timezone must be a string, an IANA zone such as \"Europe/Paris\"")
                }
                hasUserIDs = hasUserIDs || object["user_id"] != nil
                hasTags = hasTags || object["tags"] != nil
            }
            guard let web = DevicePlatform(rawValue: "web") else { throw webRefusal(line: line) }
            records.append(DeviceRecord(
                line: line, token: subscription.endpoint, userID: userID, tags: tags, platform: web, locale: locale,
                webP256dh: subscription.keys.p256dhBase64URL, webAuth: subscription.keys.authBase64URL, timezone: timezone))
        }
        return DeviceFile(records: records, hasUserIDs: hasUserIDs, hasTags: hasTags)
    }

    /// Whether any record is a Web Push subscription (the app must have Web Push configured).
    var hasWebDevices: Bool { records.contains { $0.webP256dh != nil } }

    static let columns = ["token", "user_id", "tags", "platform", "locale", "timezone"]

    /// The platforms a device file can hold: a token is all their devices need.
    static let importable: [DevicePlatform] = [.ios, .android]

    /// A Web Push subscription is an endpoint and two keys, which a token column cannot carry.
    static func webRefusal(line: Int?) -> OperatorError {
        OperatorError(.failed, (line.map { "line \($0): " } ?? "") + "a web device is a Web Push subscription (an endpoint and its keys), not a token: "
            + "import subscriptions from a jsonl file (--format jsonl) or register one with "
            + "`pgpush devices add --platform web --subscription FILE`; nothing was imported")
    }

    private static func table(
        _ rows: [(line: Int, fields: [String])], format: DeviceFileFormat, platform defaultPlatform: DevicePlatform
    ) throws(OperatorError) -> DeviceFile {
        let rows = rows.filter { !($0.fields.count == 1 && $0.fields[0].trimmingCharacters(in: .whitespaces).isEmpty) }
        guard let header = rows.first else { return DeviceFile(records: [], hasUserIDs: false, hasTags: false) }
        let names = header.fields.map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
        guard let tokenColumn = names.firstIndex(of: "token"),
              names.allSatisfy(columns.contains), Set(names).count == names.count
        else {
            throw OperatorError(.failed, "line \(header.line): expected a header naming the columns \(columns.joined(separator: format == .csv ? "," : "<tab>")) (token required), found \(names.joined(separator: ","))")
        }
        let userColumn = names.firstIndex(of: "user_id")
        let tagColumn = names.firstIndex(of: "tags")
        let platformColumn = names.firstIndex(of: "platform")
        let localeColumn = names.firstIndex(of: "locale")
        let timezoneColumn = names.firstIndex(of: "timezone")
        var records: [DeviceRecord] = []
        for row in rows.dropFirst() {
            guard row.fields.count == names.count else {
                throw OperatorError(.failed, "line \(row.line): \(row.fields.count) fields, the header has \(names.count); nothing was imported")
            }
            let user = userColumn.map { row.fields[$0].trimmingCharacters(in: .whitespaces) }
            var platform = defaultPlatform
            if let platformColumn {
                let field = row.fields[platformColumn].trimmingCharacters(in: .whitespaces).lowercased()
                if !field.isEmpty {
                    if field == "web" { throw webRefusal(line: row.line) }
                    guard let given = DevicePlatform(rawValue: field), importable.contains(given) else {
                        throw OperatorError(.failed, "line \(row.line): platform '\(field.prefix(16))' is not ios or android; nothing was imported")
                    }
                    platform = given
                }
            }
            var locale: String?
            if let localeColumn { locale = try Self.locale(row.fields[localeColumn], line: row.line) }
            records.append(DeviceRecord(
                line: row.line,
                token: try token(row.fields[tokenColumn], platform: platform, line: row.line),
                userID: user?.isEmpty == false ? user : nil,
                tags: tagColumn.map { tags(row.fields[$0]) } ?? [],
                platform: platform,
                locale: locale,
                timezone: timezoneColumn.flatMap { Self.timezone(row.fields[$0]) }))
        }
        return DeviceFile(records: records, hasUserIDs: userColumn != nil, hasTags: tagColumn != nil)
    }

    /// Checks a token as push.devices requires: an APNs token is lower-cased and 64 to 200 hex characters;
    /// an FCM registration token is case-sensitive, 16 to 1024 of A-Z, a-z, 0-9, '_', '-' and ':'.
    static func token(_ raw: String, platform: DevicePlatform = .ios, line: Int) throws(OperatorError) -> String {
        let trimmed = raw.trimmingCharacters(in: .whitespaces)
        let token = platform == .ios ? trimmed.lowercased() : trimmed
        let valid: Bool
        let rule: String
        // Not a switch: a platform without a token file form (web) is refused, whichever platforms the store knows.
        if platform == .ios {
            valid = (64...200).contains(token.utf8.count)
                && token.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) }
            rule = "a token is 64 to 200 hex characters"
        } else if platform == .android {
            valid = (16...1024).contains(token.utf8.count) && token.utf8.allSatisfy(Self.isFCMTokenByte)
            rule = "an FCM registration token is 16 to 1024 of A-Z, a-z, 0-9, '_', '-' and ':'"
        } else {
            throw webRefusal(line: line)
        }
        guard valid else {
            let shown = token.isEmpty ? "(empty)" : "'\(token.prefix(8))\(token.count > 8 ? "…" : "")'"
            throw OperatorError(.failed, "line \(line): invalid device token \(shown): \(rule); nothing was imported")
        }
        return token
    }

    /// Checks a locale as push.register_device does: trimmed, ASCII letters lowercased and `_` turned into `-`,
    /// it must match `^[a-z]{2,3}(-[a-z0-9]{1,8})*$` and be at most 35 characters (a BCP 47 tag such as `fr`,
    /// `fr-CA` or `zh-Hant-TW`). An empty field is `nil`: the device keeps the locale it has. The store still
    /// normalises what it imports with push.normalize_locale.
    static func locale(_ raw: String, line: Int) throws(OperatorError) -> String? {
        let trimmed = raw.trimmingCharacters(in: .whitespaces)
        if trimmed.isEmpty { return nil }
        let bytes = trimmed.utf8.map { byte -> UInt8 in
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"): byte + 32
            case UInt8(ascii: "_"): UInt8(ascii: "-")
            default: byte
            }
        }
        let subtags = bytes.split(separator: UInt8(ascii: "-"), omittingEmptySubsequences: false)
        let isLetter = { (byte: UInt8) in (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) }
        let isDigit = { (byte: UInt8) in (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) }
        let valid = bytes.count <= 35
            && (2...3).contains(subtags[0].count) && subtags[0].allSatisfy(isLetter)
            && subtags.dropFirst().allSatisfy { (1...8).contains($0.count) && $0.allSatisfy { isLetter($0) || isDigit($0) } }
        guard valid else {
            throw OperatorError(.failed, "line \(line): locale '\(trimmed.prefix(40))' is not a BCP 47 language tag such as "
                + "'fr', 'fr-CA' or 'zh-Hant-TW'; nothing was imported")
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// A time zone field, trimmed; empty is `nil` (the device keeps its zone). Whether PostgreSQL knows the name
    /// is the database's to say (push.is_time_zone, at import).
    static func timezone(_ raw: String) -> String? {
        let trimmed = raw.trimmingCharacters(in: .whitespaces)
        return trimmed.isEmpty ? nil : trimmed
    }

    private static func isFCMTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
             UInt8(ascii: "_"), UInt8(ascii: "-"), UInt8(ascii: ":"):
            true
        default:
            false
        }
    }

    /// Tags separated by `|` or `;`, trimmed, empty ones dropped, duplicates removed (first kept).
    static func tags(_ field: String) -> [String] {
        var seen = Set<String>()
        return field.split(whereSeparator: { $0 == "|" || $0 == ";" })
            .map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { !$0.isEmpty && seen.insert($0).inserted }
    }
}

/// RFC 4180 records with the line each starts on; a quoted field may span lines.
enum CSVReader {
    static func records(_ text: String) throws(OperatorError) -> [(line: Int, fields: [String])] {
        var records: [(line: Int, fields: [String])] = []
        var fields: [String] = []
        var field = ""
        var line = 1
        var recordLine = 1
        var inQuotes = false
        var quotedFieldLine = 1
        var characters = text.makeIterator()
        var pending: Character?
        while let character = pending ?? characters.next() {
            pending = nil
            if inQuotes {
                if character == "\"" {
                    let next = characters.next()
                    if next == "\"" {
                        field.append("\"")
                    } else {
                        inQuotes = false
                        pending = next
                    }
                } else {
                    if character == "\n" || character == "\r\n" { line += 1 }
                    field.append(character)
                }
                continue
            }
            switch character {
            case "\"" where field.isEmpty:
                inQuotes = true
                quotedFieldLine = line
            case ",":
                fields.append(field)
                field = ""
            case "\n", "\r\n":
                fields.append(field)
                records.append((recordLine, fields))
                fields = []
                field = ""
                line += 1
                recordLine = line
            case "\r":
                continue
            default:
                field.append(character)
            }
        }
        if inQuotes {
            throw OperatorError(.failed, "line \(quotedFieldLine): unterminated quoted field; nothing was imported")
        }
        if !field.isEmpty || !fields.isEmpty {
            fields.append(field)
            records.append((recordLine, fields))
        }
        return records
    }
}

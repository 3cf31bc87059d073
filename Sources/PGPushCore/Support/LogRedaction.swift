/// What log lines must never carry, taken out of any text before it is written: whole device tokens,
/// provider or access tokens (JWTs), PEM key material and passwords in connection URLs.
///
/// Errors from libraries describe themselves as they see fit, and a server message may quote a value; the
/// log handlers run every message and metadata value through ``redact(_:)`` so one careless interpolation
/// cannot leak a secret.
public enum LogRedaction {
    public static func redact(_ text: String) -> String {
        guard text.utf8.count >= 20 else { return text }
        var result = redactPEMBlocks(text)
        result = redactURLPasswords(result)
        result = redactRuns(result)
        return result
    }

    /// Hex runs of a device token's length become its short form; JWT-shaped runs (`eyJ….….…`) lose all but
    /// their header's first characters.
    private static func redactRuns(_ text: String) -> String {
        var output = ""
        output.reserveCapacity(text.utf8.count)
        var run = ""
        func flush() {
            let parts = run.split(separator: ".", omittingEmptySubsequences: false)
            if run.hasPrefix("eyJ"), parts.count >= 3, run.count >= 40 {
                output += String(run.prefix(8)) + "…(redacted JWT)"
            } else {
                output += parts.map { part in
                    part.count >= DeviceToken.validLengths.lowerBound && part.utf8.allSatisfy(DeviceToken.isHexDigit)
                        ? DeviceToken.shortened(String(part)) : String(part)
                }.joined(separator: ".")
            }
            run = ""
        }
        for character in text {
            if character.isASCII, character.isLetter || character.isNumber || character == "-" || character == "_" || character == "." {
                run.append(character)
            } else {
                flush()
                output.append(character)
            }
        }
        flush()
        return output
    }

    private static func redactPEMBlocks(_ text: String) -> String {
        guard text.contains("-----BEGIN") else { return text }
        var output = ""
        var rest = Substring(text)
        while let begin = rest.range(of: "-----BEGIN") {
            output += rest[..<begin.lowerBound]
            let afterBegin = rest[begin.upperBound...]
            if let end = afterBegin.range(of: "-----END") {
                let tail = afterBegin[end.upperBound...]
                let close = tail.range(of: "-----").map(\.upperBound) ?? tail.endIndex
                output += "[PEM block redacted]"
                rest = tail[close...]
            } else {
                output += "[PEM block redacted]"
                rest = ""
            }
        }
        return output + rest
    }

    /// `scheme://user:password@host` keeps the user and loses the password.
    private static func redactURLPasswords(_ text: String) -> String {
        guard text.contains("://") else { return text }
        var output = ""
        var rest = Substring(text)
        while let scheme = rest.range(of: "://") {
            output += rest[..<scheme.upperBound]
            rest = rest[scheme.upperBound...]
            let authorityEnd = rest.firstIndex { $0 == "/" || $0 == " " || $0 == "\"" || $0 == "\n" } ?? rest.endIndex
            let authority = rest[..<authorityEnd]
            if let at = authority.lastIndex(of: "@"), let colon = authority[..<at].firstIndex(of: ":") {
                output += authority[..<colon] + ":***" + authority[at...]
                rest = rest[authorityEnd...]
            }
        }
        return output + rest
    }
}

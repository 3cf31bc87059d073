import Foundation

/// Splits a SQL script into statements at top-level semicolons.
///
/// PostgresNIO speaks only the extended query protocol, which takes one statement per message, so a migration
/// file is sent statement by statement inside one transaction. The splitter understands what can hide a
/// semicolon: `'strings'` (with `''`), `"identifiers"`, `-- line` and `/* nested block */` comments, and
/// `$tag$ dollar-quoted $tag$` bodies.
enum SQLScript {
    static func statements(_ script: String) -> [String] {
        let chars = Array(script.unicodeScalars)
        var statements: [String] = []
        var current = String.UnicodeScalarView()
        var index = 0

        func flush() {
            let text = String(current).trimmingCharacters(in: .whitespacesAndNewlines)
            if !text.isEmpty && !isOnlyComments(text) { statements.append(text) }
            current = String.UnicodeScalarView()
        }

        while index < chars.count {
            let char = chars[index]
            let next: Unicode.Scalar? = index + 1 < chars.count ? chars[index + 1] : nil
            switch char {
            case "'", "\"":
                let end = closing(of: char, in: chars, from: index + 1)
                current.append(contentsOf: chars[index..<end])
                index = end
            case "-" where next == "-":
                var end = index
                while end < chars.count && chars[end] != "\n" { end += 1 }
                current.append(contentsOf: chars[index..<end])
                index = end
            case "/" where next == "*":
                let end = blockCommentEnd(in: chars, from: index)
                current.append(contentsOf: chars[index..<end])
                index = end
            case "$":
                if let tagEnd = dollarTagEnd(in: chars, from: index) {
                    let tag = Array(chars[index...tagEnd])
                    let end = dollarBodyEnd(in: chars, after: tagEnd + 1, tag: tag)
                    current.append(contentsOf: chars[index..<end])
                    index = end
                } else {
                    current.append(char)
                    index += 1
                }
            case ";":
                flush()
                index += 1
            default:
                current.append(char)
                index += 1
            }
        }
        flush()
        return statements
    }

    /// The index just past the closing quote; a doubled quote is an escaped one.
    private static func closing(of quote: Unicode.Scalar, in chars: [Unicode.Scalar], from start: Int) -> Int {
        var index = start
        while index < chars.count {
            if chars[index] == quote {
                if index + 1 < chars.count && chars[index + 1] == quote {
                    index += 2
                    continue
                }
                return index + 1
            }
            index += 1
        }
        return chars.count
    }

    private static func blockCommentEnd(in chars: [Unicode.Scalar], from start: Int) -> Int {
        var depth = 0
        var index = start
        while index < chars.count {
            if chars[index] == "/" && index + 1 < chars.count && chars[index + 1] == "*" {
                depth += 1
                index += 2
            } else if chars[index] == "*" && index + 1 < chars.count && chars[index + 1] == "/" {
                depth -= 1
                index += 2
                if depth == 0 { return index }
            } else {
                index += 1
            }
        }
        return chars.count
    }

    /// For `$tag$` starting at `start`, the index of the closing `$` of the tag; `nil` if this `$` is not a
    /// dollar quote (e.g. a positional parameter `$1`).
    private static func dollarTagEnd(in chars: [Unicode.Scalar], from start: Int) -> Int? {
        var index = start + 1
        while index < chars.count {
            let char = chars[index]
            if char == "$" { return index }
            let isTagChar = char == "_" || char.properties.isAlphabetic || (index > start + 1 && ("0"..."9").contains(char))
            if !isTagChar { return nil }
            index += 1
        }
        return nil
    }

    private static func dollarBodyEnd(in chars: [Unicode.Scalar], after start: Int, tag: [Unicode.Scalar]) -> Int {
        var index = start
        while index + tag.count <= chars.count {
            if chars[index] == "$" && Array(chars[index..<index + tag.count]) == tag {
                return index + tag.count
            }
            index += 1
        }
        return chars.count
    }

    private static func isOnlyComments(_ text: String) -> Bool {
        text.split(separator: "\n").allSatisfy { $0.trimmingCharacters(in: .whitespaces).hasPrefix("--") }
    }
}

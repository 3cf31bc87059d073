/// A piece of markup whose interpolated strings are escaped.
///
/// `"<td>\(app.id)</td>" as HTML` escapes `app.id`; interpolating another ``HTML`` inserts it as it is. Every
/// value from the database reaches a page through a `String` interpolation, so it is always escaped; raw
/// markup exists only as literals in this module's code.
public struct HTML: Sendable, Hashable, ExpressibleByStringInterpolation, CustomStringConvertible {
    public private(set) var rendered: String

    public init(stringLiteral value: String) {
        rendered = value
    }

    public init(stringInterpolation: StringInterpolation) {
        rendered = stringInterpolation.output
    }

    /// Markup the caller vouches for (a literal of this module); never a database value.
    init(trusted: String) {
        rendered = trusted
    }

    public var description: String { rendered }

    public static let empty: HTML = ""

    public static func + (lhs: HTML, rhs: HTML) -> HTML { HTML(trusted: lhs.rendered + rhs.rendered) }

    /// Escapes the five characters that matter in text and in quoted attribute values.
    public static func escape(_ text: some StringProtocol) -> String {
        var out = ""
        out.reserveCapacity(text.utf8.count)
        for character in text.unicodeScalars {
            switch character {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&#39;"
            default: out.unicodeScalars.append(character)
            }
        }
        return out
    }

    public struct StringInterpolation: StringInterpolationProtocol {
        var output = ""

        public init(literalCapacity: Int, interpolationCount: Int) {
            output.reserveCapacity(literalCapacity + interpolationCount * 16)
        }

        public mutating func appendLiteral(_ literal: String) { output += literal }
        public mutating func appendInterpolation(_ text: String) { output += HTML.escape(text) }
        public mutating func appendInterpolation(_ text: Substring) { output += HTML.escape(text) }
        public mutating func appendInterpolation(_ text: String?) { output += HTML.escape(text ?? "") }
        public mutating func appendInterpolation(_ markup: HTML) { output += markup.rendered }
        public mutating func appendInterpolation(_ markup: [HTML]) { for m in markup { output += m.rendered } }
        public mutating func appendInterpolation<Number: BinaryInteger>(_ number: Number) { output += String(number) }
    }
}

extension Array where Element == HTML {
    func joined() -> HTML { HTML(trusted: map(\.rendered).joined()) }
}

extension Array where Element == HTML {
    /// Joined with markup between them (a literal of this module, like `" · "`).
    func joined(separator: HTML) -> HTML { HTML(trusted: map(\.rendered).joined(separator: separator.rendered)) }
}

import Foundation

/// A value of a table cell, typed for the JSON export.
public enum CellValue: Sendable, Hashable {
    case text(String)
    case integer(Int64)
    case number(Double)
    case null

    /// The value as text (CSV, and the page when the cell has no markup of its own).
    var text: String {
        switch self {
        case .text(let s): return s
        case .integer(let n): return String(n)
        case .number(let d): return String(d)
        case .null: return ""
        }
    }
}

/// One cell: its exported value, and how the page shows it.
public struct Cell: Sendable {
    public var value: CellValue
    /// What the page shows; the escaped value when nil.
    public var html: HTML?

    public init(_ value: CellValue, html: HTML? = nil) {
        self.value = value
        self.html = html
    }

    static func text(_ s: String?, link: String? = nil) -> Cell {
        guard let s else { return Cell(.null) }
        if let link { return Cell(.text(s), html: "<a href=\"\(link)\">\(s)</a>") }
        return Cell(.text(s))
    }

    static func integer(_ n: Int64?, link: String? = nil) -> Cell {
        guard let n else { return Cell(.null, html: "—") }
        if let link { return Cell(.integer(n), html: "<a href=\"\(link)\">\(Format.count(n))</a>") }
        return Cell(.integer(n), html: "\(Format.count(n))")
    }
}

/// A table of a page, which the page shows and which exports as CSV and JSON (`?format=csv&table=NAME`, the
/// page's own filters kept).
public struct DataTable: Sendable {
    /// Its name in export links and file names: lowercase letters and dashes.
    public var name: String
    public var columns: [String]
    public var rows: [[Cell]]
    /// Columns shown right-aligned (numbers).
    public var numeric: Set<Int> = []

    public init(name: String, columns: [String], rows: [[Cell]], numeric: Set<Int> = []) {
        self.name = name
        self.columns = columns
        self.rows = rows
        self.numeric = numeric
    }

    /// CSV (RFC 4180). A field that a spreadsheet would run as a formula (`=`, `+`, `-`, `@` first) gets a
    /// leading apostrophe: database values are data, never formulas.
    public var csv: String {
        var out = columns.map(Self.csvField).joined(separator: ",") + "\r\n"
        for row in rows {
            out += row.map { cell -> String in
                if case .text(let s) = cell.value, let first = s.first, "=+-@\t\r".contains(first) {
                    return Self.csvField("'" + s)
                }
                return Self.csvField(cell.value.text)
            }.joined(separator: ",") + "\r\n"
        }
        return out
    }

    static func csvField(_ s: String) -> String {
        guard s.contains(where: { $0 == "," || $0 == "\"" || $0 == "\n" || $0 == "\r" }) else { return s }
        return "\"" + s.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }

    /// A JSON array of objects, one per row, keyed by column, values typed.
    public var json: String {
        var out = "["
        for (r, row) in rows.enumerated() {
            out += r == 0 ? "\n  {" : ",\n  {"
            for (c, cell) in row.enumerated() where c < columns.count {
                out += (c == 0 ? "" : ", ") + Self.jsonString(columns[c]) + ": "
                switch cell.value {
                case .text(let s): out += Self.jsonString(s)
                case .integer(let n): out += String(n)
                case .number(let d): out += d.isFinite ? String(d) : "null"
                case .null: out += "null"
                }
            }
            out += "}"
        }
        return out + (rows.isEmpty ? "]\n" : "\n]\n")
    }

    /// A JSON string literal; `<`, `>` and `&` are escaped too, so the text is inert even if a browser sniffs it.
    static func jsonString(_ s: String) -> String {
        var out = "\""
        for scalar in s.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case "<", ">", "&", "\u{2028}", "\u{2029}":
                out += String(format: "\\u%04x", scalar.value)
            default:
                if scalar.value < 0x20 {
                    out += String(format: "\\u%04x", scalar.value)
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        return out + "\""
    }
}

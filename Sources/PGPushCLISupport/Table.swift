import Foundation

/// A plain-text table with aligned columns, for operator output (`apps list`, `stats`).
///
/// Numbers are right-aligned, everything else left-aligned; a missing value prints as `-`.
public struct Table {
    public let headers: [String]
    public private(set) var rows: [[String]] = []
    private var numeric: [Bool]

    public init(_ headers: [String]) {
        self.headers = headers
        self.numeric = Array(repeating: true, count: headers.count)
    }

    public mutating func append(_ cells: [String?]) {
        precondition(cells.count == headers.count, "a row needs one cell per column")
        let row = cells.map { $0 ?? "-" }
        for (index, cell) in row.enumerated() where cell != "-" && Double(cell) == nil {
            numeric[index] = false
        }
        rows.append(row)
    }

    /// The rendered table, one line per row under a header and a rule; no trailing spaces.
    public func render() -> String {
        let widths = headers.indices.map { column in
            ([headers[column]] + rows.map { $0[column] }).map(\.count).max() ?? 0
        }
        func line(_ cells: [String]) -> String {
            let padded = cells.enumerated().map { column, cell in
                let padding = String(repeating: " ", count: widths[column] - cell.count)
                return numeric[column] && !rows.isEmpty ? padding + cell : cell + padding
            }
            return padded.joined(separator: "  ").replacingOccurrences(of: "\\s+$", with: "", options: .regularExpression)
        }
        var lines = [line(headers), line(widths.map { String(repeating: "-", count: $0) })]
        lines += rows.map(line)
        return lines.joined(separator: "\n")
    }
}

/// A JSON-ready value: `nil` becomes `null`.
public func jsonValue(_ value: Any?) -> Any {
    value ?? NSNull()
}

/// What a page handler knows about the request it answers.
struct PageContext: Sendable {
    /// The reverse proxy's prefix, or empty.
    let basePath: String
    /// The request's query: filters, and the export's `format` and `table`.
    let query: FormData
    let allowActions: Bool
    let refreshSeconds: Int
    /// What the login lacks that the page can do without (`pgpush_dashboard_actions` with `--allow-actions`):
    /// said above the page's content.
    var loginNotice: LoginProblem? = nil

    /// A link to a route of the dashboard (`path` begins with `/`), under the base path.
    func link(_ path: String, _ query: String = "") -> String { basePath + path + query }
}

/// A rendered page: its title, its body, the tables it exports, and whether it refreshes itself.
struct Page: Sendable {
    var title: String
    var body: HTML
    var tables: [DataTable]
    var live: Bool = false
}

enum Layout {
    /// The whole document around a page's body. The stylesheet and the script come from this server
    /// (`/assets/…`); the Content-Security-Policy allows nothing else.
    static func document(_ page: Page, _ context: PageContext) -> HTML {
        let nav: [(String, String)] = [("/", "Overview"), ("/jobs", "Jobs"), ("/outcomes", "Outcomes"), ("/pruned", "Pruned"), ("/audit", "Audit")]
        let links = nav.map { path, name in HTML("<a href=\"\(context.link(path))\">\(name)</a>") }.joined()
        let refresh: HTML = page.live ? " data-refresh=\"\(context.refreshSeconds)\"" : ""
        let mode: HTML = context.allowActions ? "<span class=\"mode act\">actions on</span>" : "<span class=\"mode\">read-only</span>"
        let notice: HTML = context.loginNotice.map { problem in
            HTML("<p id=\"login-notice\" class=\"bad\">The actions will be refused: \(problem.summary); \(problem.fix)</p>\n")
        } ?? .empty
        return """
            <!doctype html>
            <html lang="en">
            <head>
            <meta charset="utf-8">
            <meta name="viewport" content="width=device-width, initial-scale=1">
            <meta name="color-scheme" content="light dark">
            <title>\(page.title) · pgpush</title>
            <link rel="stylesheet" href="\(context.link("/assets/app.css"))">
            <script src="\(context.link("/assets/app.js"))" defer></script>
            </head>
            <body>
            <header><strong>pgpush</strong><nav>\(links)</nav>\(mode)<button id="live-toggle" type="button" hidden>Pause live updates</button></header>
            <main id="content"\(refresh)>
            \(notice)<h1>\(page.title)</h1>
            \(page.body)
            </main>
            </body>
            </html>
            """
    }

    /// A table with its CSV and JSON export links (the page's filters kept).
    static func table(_ table: DataTable, _ context: PageContext, empty: String = "Nothing here.") -> HTML {
        let head = table.columns.enumerated().map { i, c in
            HTML("<th\(table.numeric.contains(i) ? HTML(" class=\"num\"") : .empty)>\(c)</th>")
        }.joined()
        let rows = table.rows.map { row in
            let cells = row.enumerated().map { i, cell in
                HTML("<td\(table.numeric.contains(i) ? HTML(" class=\"num\"") : .empty)>\(cell.html ?? HTML("\(cell.value.text)"))</td>")
            }.joined()
            return HTML("<tr>\(cells)</tr>\n")
        }.joined()
        let csv = exportLink(table.name, "csv", context)
        let json = exportLink(table.name, "json", context)
        let body: HTML = table.rows.isEmpty
            ? "<p class=\"empty\">\(empty)</p>"
            : "<div class=\"scroll\"><table id=\"table-\(table.name)\"><thead><tr>\(head)</tr></thead><tbody>\(rows)</tbody></table></div>"
        return """
            \(body)
            <p class="export">Export: <a href="\(csv)">CSV</a> · <a href="\(json)">JSON</a></p>
            """
    }

    static func exportLink(_ table: String, _ format: String, _ context: PageContext) -> String {
        var query = FormData(pairs: context.query.pairs.filter { $0.0 != "format" && $0.0 != "table" })
        query = FormData(pairs: query.pairs + [("format", format), ("table", table)])
        return "?" + String(FormData.encode(query.pairs).dropFirst())
    }

    /// A row of figures at the top of a page.
    static func stats(_ items: [(String, HTML, String?)]) -> HTML {
        let cells = items.map { label, value, cls in
            HTML("<div class=\"stat\(cls.map { " " + $0 } ?? "")\"><span class=\"label\">\(label)</span><span class=\"value\">\(value)</span></div>")
        }.joined()
        return "<div class=\"stats\">\(cells)</div>"
    }
}

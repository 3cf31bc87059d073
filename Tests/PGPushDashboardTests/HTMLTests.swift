import Testing

@testable import PGPushDashboard

/// The escaping every page relies on, and the exports: pure, fast tier.
@Suite struct HTMLTests {
    @Test func interpolatedStringsAreEscaped() {
        let value = "<script>alert('x') & \"y\"</script>"
        let html: HTML = "<td title=\"\(value)\">\(value)</td>"
        #expect(html.rendered == "<td title=\"&lt;script&gt;alert(&#39;x&#39;) &amp; &quot;y&quot;&lt;/script&gt;\">&lt;script&gt;alert(&#39;x&#39;) &amp; &quot;y&quot;&lt;/script&gt;</td>")
        let optional: String? = "<b>"
        #expect(("\(optional)" as HTML).rendered == "&lt;b&gt;")
    }

    @Test func nestedMarkupIsKeptAndItsValuesStayEscaped() {
        let inner: HTML = "<b>\("<i>")</b>"
        let outer: HTML = "<p>\(inner)</p>"
        #expect(outer.rendered == "<p><b>&lt;i&gt;</b></p>")
    }

    @Test func csvQuotesAndDefusesFormulas() {
        let table = DataTable(
            name: "t", columns: ["a", "b"],
            rows: [[Cell(.text("x,\"y\"")), Cell(.integer(3))], [Cell(.text("=HYPERLINK(\"evil\")")), Cell(.null)]])
        #expect(table.csv == "a,b\r\n\"x,\"\"y\"\"\",3\r\n\"'=HYPERLINK(\"\"evil\"\")\",\r\n")
    }

    @Test func jsonIsTypedAndInert() {
        let table = DataTable(name: "t", columns: ["app", "n", "r"], rows: [[Cell(.text("<script>\"\n")), Cell(.integer(42)), Cell(.null)]])
        #expect(table.json == "[\n  {\"app\": \"\\u003cscript\\u003e\\\"\\n\", \"n\": 42, \"r\": null}\n]\n")
        #expect(DataTable(name: "e", columns: ["a"], rows: []).json == "[]\n")
    }

    @Test func tokensAreShortened() {
        let token = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90"
        #expect(Format.token(token) == "a1b2c3d4…8f90")
        #expect(Format.token("short") == "shor…")
    }

    @Test func countsAreGrouped() {
        #expect(Format.count(Int64(1_500)) == "1,500")
        #expect(Format.count(Int64(10_000_000)) == "10,000,000")
        #expect(Format.count(Int64(999)) == "999")
    }
}

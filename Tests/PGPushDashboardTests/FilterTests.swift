import Foundation
import PGPushStore
import Testing

@testable import PGPushDashboard

/// Filters live in the URL: parsing, re-encoding, the jobs filter. Pure, fast tier.
@Suite struct FilterTests {
    @Test func formDataDecodesPlusAndPercent() {
        let form = FormData("app=my+app&reason=bad%20topic%3A%3Cx%3E&empty=&state=done&state=failed")
        #expect(form["app"] == "my app")
        #expect(form["reason"] == "bad topic:<x>")
        #expect(form["empty"] == nil)
        #expect(form["state"] == "done")
        #expect(form["missing"] == nil)
    }

    @Test func settingAKeyKeepsTheOthers() {
        let form = FormData("app=news&before=90&state=")
        #expect(form.setting("before", "40") == "?app=news&before=40")
        #expect(form.setting("before", nil) == "?app=news")
        #expect(FormData.percentEncode("a b/<c>&") == "a%20b%2F%3Cc%3E%26")
    }

    @Test func jobsFilterFromTheURL() {
        let filter = JobsPage.filter(
            FormData("app=news&state=running&platform=android&priority=10&from=2026-11-25&to=2026-11-26T12%3A30&job=&key=order-1&before=500"),
            pageSize: 50)
        #expect(filter.app == "news")
        #expect(filter.state == "running")
        #expect(filter.platform == "android")
        #expect(filter.priority == 10)
        #expect(filter.from == Date(timeIntervalSince1970: 1_795_564_800))
        #expect(filter.to == Date(timeIntervalSince1970: 1_795_696_200))
        #expect(filter.jobID == nil)
        #expect(filter.idempotencyKey == "order-1")
        #expect(filter.before == 500)
        #expect(filter.limit == 50)
    }

    @Test func unknownFilterValuesAreLeftOut() {
        let filter = JobsPage.filter(FormData("state=exploded&platform=windows&priority=high&before=x"), pageSize: 10)
        #expect(filter.state == nil && filter.platform == nil && filter.priority == nil && filter.before == nil)
    }

    @Test func labelFiltersFromTheURL() {
        let filter = JobsPage.filter(
            FormData("label=campaign%3Ablack-friday&label=team%3Dgrowth&label=+&label=nonsense&label=%3Ano-key&label=url:a:b=c"), pageSize: 10)
        #expect(filter.labels == [
            DashboardLabel("campaign", "black-friday"), DashboardLabel("team", "growth"), DashboardLabel("url", "a:b=c"),
        ])
        #expect(JobsPage.label(String(repeating: "k", count: 65) + ":v") == nil)
        #expect(JobsPage.parameter(DashboardLabel("campaign", "x=y")) == "campaign:x=y")
        #expect(JobsPage.parameter(DashboardLabel("a:b", "x")) == nil, "a key with a separator cannot be a filter")
        #expect(FormData("app=news&before=9&label=a%3Ab").adding("label", "c:d", removing: ["before"]) == "?app=news&label=a%3Ab&label=c%3Ad")
        #expect(FormData("label=a%3Ab").adding("label", "a:b") == "?label=a%3Ab")
    }

    @Test func exportLinksKeepTheFilters() {
        let context = PageContext(basePath: "/p", query: FormData("app=news&format=html"), allowActions: false, refreshSeconds: 5)
        #expect(Layout.exportLink("jobs", "csv", context) == "?app=news&format=csv&table=jobs")
    }
}

/// The outcomes page reads one daily partition per statement.
@Suite struct DayWindowTests {
    @Test func aRangeIsCutAtUTCMidnights() {
        let from = Date(timeIntervalSince1970: 1_795_564_800 - 3600)  // 2026-11-24 23:00Z
        let to = Date(timeIntervalSince1970: 1_795_564_800 + 86_400 + 60)  // 2026-11-26 00:01Z
        let windows = OutcomesPage.dayWindows(from: from, to: to)
        #expect(windows.map { $0.0.timeIntervalSince1970 } == [1_795_561_200, 1_795_564_800, 1_795_651_200])
        #expect(windows.map { $0.1.timeIntervalSince1970 } == [1_795_564_800, 1_795_651_200, 1_795_651_260])
        #expect(OutcomesPage.dayWindows(from: to, to: to).isEmpty)
    }

    @Test func onlyWholeDaysThatEndedTenMinutesAgoAreKept() {
        let midnight = Date(timeIntervalSince1970: 1_795_564_800)  // 2026-11-25 00:00Z
        let dayBefore = midnight.addingTimeInterval(-86_400)
        #expect(OutcomesPage.isClosedDay(from: dayBefore, to: midnight, now: midnight.addingTimeInterval(601)))
        #expect(!OutcomesPage.isClosedDay(from: dayBefore, to: midnight, now: midnight.addingTimeInterval(30)),
                "outcomes of the day's last seconds may still be on their way")
        #expect(!OutcomesPage.isClosedDay(from: dayBefore.addingTimeInterval(3600), to: midnight, now: midnight.addingTimeInterval(3600)),
                "a partial first day changes with the range")
        #expect(!OutcomesPage.isClosedDay(from: midnight, to: midnight.addingTimeInterval(3600), now: midnight.addingTimeInterval(7200)),
                "today is not over")
    }
}

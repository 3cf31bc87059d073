import Foundation
import Testing

@testable import PGPushDashboard
@testable import PGPushStore

/// Web Push as the third platform on the pages, and its own pause apart from an app's: pure, fast tier.
@Suite struct WebPushRenderingTests {
    static let context = PageContext(basePath: "", query: FormData(nil), allowActions: false, refreshSeconds: 5)
    static let acting = PageContext(basePath: "", query: FormData(nil), allowActions: true, refreshSeconds: 5)

    static func job(total: Int64?, android: Int64?, web: Int64?) -> DashboardJobRow {
        DashboardJobRow(
            id: 7, appID: "news", state: "running", priority: 0, total: total, delivered: 1_700, failed: 100, pruned: 0,
            androidTotal: android, androidDelivered: 450, androidFailed: 10, webTotal: web, webDelivered: 280,
            webFailed: 20, createdAt: Date(timeIntervalSince1970: 1_795_564_800), finishedAt: nil, idempotencyKey: nil,
            labels: [])
    }

    @Test func theWebPlatformFiltersJobsAndOutcomes() {
        #expect(JobsPage.filter(FormData("platform=web"), pageSize: 10).platform == "web")
        #expect(Platforms.parse("web") == "web" && Platforms.parse("windows") == nil && Platforms.parse(nil) == nil)
        #expect(Platforms.all == ["ios", "android", "web"])
    }

    @Test func iosIsWhatAndroidAndTheWebLeave() {
        let job = Self.job(total: 2_000, android: 500, web: 300)
        #expect(job.iosTotal == 1_200)
        #expect(job.iosDelivered == 1_700 - 450 - 280)
        #expect(job.iosFailed == 100 - 10 - 20)
        #expect(Self.job(total: nil, android: nil, web: nil).iosTotal == nil, "a job not expanded yet has no total")
        #expect(Self.job(total: 2_000, android: nil, web: 0).iosTotal == 2_000, "a job expanded before 0011 and 0027")
    }

    @Test func theProgressBarHasAWebPart() {
        let bar = Charts.progress(Self.job(total: 2_000, android: 500, web: 300)).rendered
        #expect(bar.contains("<rect class=\"web\""))
        #expect(bar.contains("Web 280 delivered, 20 failed; of 2,000"))
        #expect(bar.contains("iOS 970 delivered, 70 failed;"))
        let chart = Charts.sendsPerMinute(["ios": [1, 2], "android": [3, 4], "web": [5, 6]], windowStart: Date()).rendered
        #expect(chart.contains("class=\"line-web\"") && chart.contains("in all") && chart.contains(": 21 in all"))
    }

    @Test func theOverviewShowsAPausedWebPushApartFromPausedApps() throws {
        let overview = DashboardOverview(
            takenAt: Date(), apps: [
                DashboardAppSummary(id: "shop", environment: "production", pausedReason: nil, pausedAt: nil,
                                    webPushPausedReason: #"403 {"reason":"BadJwtToken"} <b>"#),
                DashboardAppSummary(id: "news", environment: "production", pausedReason: "BadTopic", pausedAt: Date(),
                                    webPushPausedReason: nil),
                DashboardAppSummary(id: "both", environment: "production", pausedReason: "paused by ops", pausedAt: Date(),
                                    webPushPausedReason: "403 BadJwtToken"),
                DashboardAppSummary(id: "fine", environment: "sandbox", pausedReason: nil, pausedAt: nil, webPushPausedReason: nil),
            ], backlogTokens: 0, oldestQueuedAgeSeconds: nil, windowStart: Date(),
            sendsPerMinute: [SendsInMinute(minute: 3, platform: "web", count: 12)], delivered: 0, failed: 0,
            enqueueToFirstSendP50: nil, enqueueToFirstSendP95: nil, workersAlive: 1, workersReady: 1)
        let page = OverviewPage.render(overview, Self.context)
        let html = page.body.rendered
        let paused = try #require(html.element(id: "paused-apps", tag: "ul"))
        #expect(paused.contains(">news</a>") && paused.contains(">both</a>") && !paused.contains(">shop</a>"))
        let webPaused = try #require(html.element(id: "web-push-paused-apps", tag: "ul"))
        #expect(webPaused.contains(">shop</a>: Web Push paused: 403 {&quot;reason&quot;:&quot;BadJwtToken&quot;} &lt;b&gt;"))
        #expect(!webPaused.contains(">news</a>") && !webPaused.contains(">both</a>"), "a paused app is listed once, as paused")
        #expect(html.contains("<span class=\"web\">■ Web (Web Push)</span>"))

        let status = page.tables[0].rows.map { row in row[2].value }
        #expect(status == [
            .text("Web Push paused: 403 {\"reason\":\"BadJwtToken\"} <b>"), .text("paused: BadTopic"),
            .text("paused: paused by ops; Web Push paused: 403 BadJwtToken"), .text("active"),
        ])
        let sends = page.tables[1].rows.map { row in row[1].value }
        #expect(sends == [.text("web")])
    }

    static func app(paused: String?, webPaused: String?, web: Bool = true) -> DashboardAppDetail {
        DashboardAppDetail(
            id: "news", topic: "com.example.news", environment: "production", apnsAuth: "token", fcmProjectID: nil,
            webPushConfigured: web, vapidPublicKey: web ? "BBqu8zdH-YfQ4EFxIxrsSFEdo8JWPfOpx1fDJwuSAd0r2gBhzkFYLGOX7u1FNooTvt7YvEncyn9y0A5p6ZQ6YcY" : nil,
            vapidSubject: web ? "mailto:push@news.example.com" : nil, webPushPausedReason: webPaused, rateLimit: nil,
            pausedReason: paused, pausedAt: paused == nil ? nil : Date(), pausedBy: nil, windowAnswered: 0,
            windowBadDeviceTokens: 0, suppressedPruneCandidates: 0, waitingPruneCandidates: 0, failures: [])
    }

    @Test func theAppPageShowsItsWebPushAndOffersTheRightResume() throws {
        let render = { (app: DashboardAppDetail, context: PageContext) in
            AppPage.render(app, context, valveShare: 0.2, minimumAnswers: 1000).body.rendered
        }
        // Its Web Push alone paused: said apart from the app's status, which stays active.
        let webPaused = render(Self.app(paused: nil, webPaused: "403 BadJwtToken"), Self.acting)
        let webPush = try #require(webPaused.element(id: "web-push", tag: "dd"))
        #expect(webPush.contains("subject mailto:push@news.example.com"))
        #expect(webPush.contains("<code id=\"vapid-public-key\">BBqu8zdH-"))
        #expect(webPush.contains("<span class=\"paused\" id=\"web-push-pause-reason\">Web Push paused: 403 BadJwtToken</span>"))
        #expect(webPaused.contains("<dt>Status</dt><dd>active</dd>"))
        #expect(webPaused.contains(">Resume Web Push</button>") && webPaused.contains(">Pause app</button>"))

        // The whole app paused: one resume, which lifts both.
        let bothPaused = render(Self.app(paused: "BadTopic", webPaused: "403 BadJwtToken"), Self.acting)
        #expect(bothPaused.contains(">Resume app</button>") && !bothPaused.contains("Resume Web Push") && !bothPaused.contains("Pause app"))

        // Sending, and without Web Push; read-only offers no button.
        let sending = render(Self.app(paused: nil, webPaused: nil), Self.acting)
        #expect(try #require(sending.element(id: "web-push", tag: "dd")).hasSuffix("<br>sending</dd>"))
        #expect(!sending.contains("Resume") && sending.contains(">Pause app</button>"))
        #expect(try #require(render(Self.app(paused: nil, webPaused: nil, web: false), Self.context).element(id: "web-push", tag: "dd")) == "<dd id=\"web-push\">not configured</dd>")
        #expect(!render(Self.app(paused: nil, webPaused: "403 BadJwtToken"), Self.context).contains("<button"))
    }

    @Test func webPushReasonsHaveHints() {
        for reason in ["EndpointNotAllowed", "BadJwtToken", "Gone", "NotFound"] {
            #expect(Remediation.hint(for: reason) != nil, "\(reason)")
        }
        #expect(Remediation.hint(for: "BadJwtToken")!.contains("subject"))
    }
}

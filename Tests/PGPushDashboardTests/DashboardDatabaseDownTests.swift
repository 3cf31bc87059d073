import Foundation
import Logging
import PGPushDevelopment
import PGPushTestSupport
import Testing

/// The dashboard while its database cannot be reached: a page answers 503 with the reason within its deadline
/// (statement timeout × 6 + 5 s), instead of hanging or claiming an internal error.
@Suite(.timeLimit(.minutes(1)))
struct DashboardDatabaseDownTests {
    @Test(.network) func aPageAnswers503WhenTheDatabaseCannotBeReached() async throws {
        let nobody = try freeLoopbackPort()
        let logger = { var logger = Logger(label: "pgpush.test.dashboard"); logger.logLevel = .critical; return logger }()
        try await withTestClient("postgres://postgres@127.0.0.1:\(nobody)/postgres?sslmode=disable", logger: logger) { client in
            let configuration = DashboardHarness.configuration { $0.statementTimeout = .milliseconds(200) }
            try await DashboardHarness.with(configuration, client: client, logger: logger) { dashboard in
                let started = ContinuousClock.now
                let reply = try await HTTPClient.send("GET", dashboard.base + "/jobs")
                #expect(reply.status == 503, "\(reply.status): \(reply.body)")
                #expect(reply.body.contains("the database is unreachable"), "\(reply.body)")
                #expect(ContinuousClock.now - started < .seconds(15))
            }
        }
    }
}

import PGPushCore
@testable import PGPushDispatcher
import PGPushStore
import PostgresNIO
import Testing

/// What a failover looks like to the worker's log and `/readyz`: a burst of failed calls from every loop.
@Suite struct DatabaseStatusTests {
    let start = ContinuousClock.now

    @Test func theFirstFailureIsReportedAtOnceThenAtMostEveryFewSeconds() {
        var status = DatabaseStatus(reportEvery: .seconds(5))
        #expect(status.isAvailable)
        #expect(status.failed(.readOnly, at: start) == .unavailable(.readOnly, since: start, failures: 1))
        #expect(!status.isAvailable)
        for second in 1..<5 {
            #expect(status.failed(.readOnly, at: start + .seconds(second)) == nil, "second \(second)")
            #expect(status.failed(.readOnly, at: start + .seconds(second) + .milliseconds(500)) == nil)
        }
        #expect(status.failed(.readOnly, at: start + .seconds(5)) == .unavailable(.readOnly, since: start, failures: 10))
    }

    @Test func aChangedProblemIsReportedAtOnceWithTheOutageStillCountedFromItsStart() {
        var status = DatabaseStatus(reportEvery: .seconds(5))
        _ = status.failed(.unreachable, at: start)
        #expect(status.failed(.readOnly, at: start + .seconds(1)) == .unavailable(.readOnly, since: start, failures: 2))
        #expect(status.problem == .readOnly)
    }

    @Test func theFirstSuccessEndsTheOutageOnceWithItsLength() {
        var status = DatabaseStatus()
        #expect(status.succeeded(at: start) == nil, "nothing to report while all is well")
        _ = status.failed(.shuttingDown, at: start)
        #expect(status.succeeded(at: start + .seconds(12)) == .recovered(after: .seconds(12)))
        #expect(status.isAvailable)
        #expect(status.succeeded(at: start + .seconds(13)) == nil)
        #expect(status.failed(.unreachable, at: start + .seconds(14)) == .unavailable(.unreachable, since: start + .seconds(14), failures: 1),
                "a new outage starts its own count")
    }

    @Test func errorsAreReadAsTheProblemsAFailoverShows() {
        #expect(DatabaseProblem.of(PGPushError(.databaseUnavailable, "a database call did not finish within 25 seconds")) == .unreachable)
        #expect(DatabaseProblem.of(PGPushError(.invalidConfiguration, "bad")) == nil)
        #expect(DatabaseProblem.of(CancellationError()) == nil)
    }
}

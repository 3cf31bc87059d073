import Testing

@testable import PGPushDispatcher

/// `/healthz`'s rule, with the time passed in.
@Suite struct WorkerHealthTests {
    static let start = ContinuousClock.now

    static func health() -> WorkerHealth {
        WorkerHealth(databaseWindow: .seconds(30), loopWindow: .seconds(60), now: start)
    }

    @Test func aWorkerThatReachesItsDatabaseAndTurnsIsHealthy() {
        var health = Self.health()
        health.databaseAnswered(at: Self.start + .seconds(25))
        health.loopTurned(at: Self.start + .seconds(40))
        #expect(health.isHealthy(at: Self.start + .seconds(50)))
    }

    @Test func aWorkerCutOffFromPostgreSQLForALeaseIsUnhealthy() {
        var health = Self.health()
        health.loopTurned(at: Self.start + .seconds(31))
        #expect(!health.isHealthy(at: Self.start + .seconds(31)))
        health.databaseAnswered(at: Self.start + .seconds(32))
        #expect(health.isHealthy(at: Self.start + .seconds(32)), "healthy again once the database answers")
    }

    @Test func aWedgedClaimLoopIsUnhealthyEvenWithHeartbeats() {
        var health = Self.health()
        health.databaseAnswered(at: Self.start + .seconds(61))
        #expect(!health.isHealthy(at: Self.start + .seconds(61)))
    }
}

/// `/readyz`'s rule: the first reason that applies, or ready.
@Suite struct WorkerReadinessTests {
    @Test func aWorkerThatReachesItsDatabaseAndItsProvidersIsReady() {
        #expect(WorkerReadiness.notReadyReason(databaseAnswered: true, databaseProblem: nil, draining: false, proxyProblem: nil) == nil)
    }

    @Test func providersUnreachableThroughTheProxyMakeItNotReadyAndSayWhy() {
        let problem = "HTTPS proxy http://***@proxy:3128 refused CONNECT api.push.apple.com:443: 407 Proxy Authentication Required"
        #expect(WorkerReadiness.notReadyReason(databaseAnswered: true, databaseProblem: nil, draining: false, proxyProblem: problem)
            == "providers unreachable: " + problem)
    }

    @Test func drainingAndTheDatabaseComeFirst() {
        #expect(WorkerReadiness.notReadyReason(databaseAnswered: true, databaseProblem: "the database is unreachable", draining: true, proxyProblem: "x")?
            .hasPrefix("draining") == true)
        #expect(WorkerReadiness.notReadyReason(databaseAnswered: false, databaseProblem: "the database is unreachable", draining: false, proxyProblem: "x")
            == "the database is unreachable")
        #expect(WorkerReadiness.notReadyReason(databaseAnswered: false, databaseProblem: nil, draining: false, proxyProblem: nil)?
            .contains("database") == true)
    }
}

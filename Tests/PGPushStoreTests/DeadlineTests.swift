import PGPushCore
@testable import PGPushStore
import Testing

@Suite(.timeLimit(.minutes(1)))
struct DeadlineTests {
    @Test func aCallThatHangsIsAbandonedAtItsDeadline() async throws {
        let started = ContinuousClock.now
        await #expect(throws: PGPushError.self) {
            try await withDeadline(.milliseconds(200)) {
                // Ignores cancellation, like a client call stuck on a dead connection.
                while ContinuousClock.now - started < .seconds(5) { try? await Task.sleep(for: .milliseconds(20)) }
                return 1
            }
        }
        #expect(ContinuousClock.now - started < .seconds(2))
    }

    @Test func aCallThatFinishesInTimeKeepsItsResultOrError() async throws {
        #expect(try await withDeadline(.seconds(5)) { 42 } == 42)
        struct Boom: Error {}
        await #expect(throws: Boom.self) { try await withDeadline(.seconds(5)) { () async throws -> Int in throw Boom() } }
    }
}

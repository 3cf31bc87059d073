import Foundation
import PGPushTestSupport
import Testing

/// `--http2-engine` on `pgpush worker`: checked before the worker connects to anything.
@Suite(.network, .timeLimit(.minutes(1)))
struct HTTP2EngineFlagTests {
    @Test func theWorkerRefusesAnEngineItDoesNotHave() async throws {
        let result = try await CLIProcess.run(
            ["worker", "--http2-engine", "quic", "--metrics-port=-1", "--database-url", "postgres://pusher@127.0.0.1:1/push_nowhere"],
            timeout: .seconds(30))
        #expect(result.status == 64, "\(result)")
        #expect(result.stderr.contains("--http2-engine must be nio or nghttp2, not quic"), "\(result)")
    }
}

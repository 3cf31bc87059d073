import CryptoExtras
import Foundation
import Logging
import PGPushTransport
import PGPushCore
import PGPushDispatcher
import PGPushSimulator
import PGPushStore
import PGPushTestSupport
import Testing

/// The fleet's FCM access token against the FCM simulator's token endpoint and a real database.
@Suite(.database, .timeLimit(.minutes(2)))
struct FCMAccessTokenSourceTests {
    static let clientEmail = "worker@token-test.iam.gserviceaccount.com"

    /// A simulator trusting `trusted` (or nothing) and a service account whose token_uri points at it.
    static func withSimulator(
        trusting trusted: Bool,
        _ body: @Sendable (FCMSimulator, FCMServiceAccount) async throws -> Void
    ) async throws {
        let key = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        let directory = NSTemporaryDirectory() + "pgpush-token-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var configuration = FCMSimulatorConfiguration()
        configuration.certificateDirectory = directory
        if trusted {
            configuration.serviceAccounts = [FCMSimulatorServiceAccount(
                clientEmail: clientEmail, projectID: "token-test", publicKey: key.publicKey, privateKeyID: "k1")]
        }
        let simulator = FCMSimulator(configuration: configuration, logger: Logger(label: "test.fcm"))
        let port = try await simulator.start()
        let json: [String: String] = [
            "type": "service_account", "project_id": "token-test", "private_key_id": "k1", "private_key": key.pkcs8PEMRepresentation,
            "client_email": clientEmail, "token_uri": "https://localhost:\(port)/token",
        ]
        let account = try FCMServiceAccount(json: try JSONSerialization.data(withJSONObject: json))
        do {
            try await body(simulator, account)
        } catch {
            await simulator.shutdown()
            throw error
        }
        await simulator.shutdown()
    }

    static func source(_ db: TestDatabase, _ simulator: FCMSimulator, _ account: FCMServiceAccount, worker: String) -> SharedFCMAccessTokenSource {
        SharedFCMAccessTokenSource(
            account: account, exchange: FCMTokenExchange(additionalTrustRootsPEMFile: simulator.caCertificatePath),
            store: QueueStore(client: db.client, workerID: worker, logger: db.logger), logger: db.logger)
    }

    @Test func workersShareOneTokenAndARefusedRefreshIsReported() async throws {
        try await TestDatabase.with { db in
            try await Self.withSimulator(trusting: true) { simulator, account in
                let first = Self.source(db, simulator, account, worker: "w1")
                let token = try await first.currentToken()
                #expect(token.authorizationHeaderValue.hasPrefix("Bearer "))
                #expect(try await first.currentToken() == token)
                // A second worker adopts the fleet's token from the database instead of exchanging its own.
                let second = Self.source(db, simulator, account, worker: "w2")
                #expect(try await second.currentToken().jwt == token.jwt)
                #expect(simulator.statistics.tokenExchanges[Self.clientEmail] == 1)
                #expect(try await db.scalar("SELECT count(*) FROM push.provider_tokens WHERE expires_at > now()") == 1)

                // FCM said 401: one refresh, with a new exchange.
                await first.reportRejected(token, reason: ProviderResponse.unauthenticated)
                #expect(!first.refreshDidNotHelp)
                let fresh = try await first.currentToken()
                #expect(fresh.jwt != token.jwt)
                #expect(simulator.statistics.tokenExchanges[Self.clientEmail] == 2)
                // The fresh token refused as well: refreshing does not help; the sender pauses the app.
                await first.reportRejected(fresh, reason: ProviderResponse.unauthenticated)
                #expect(first.refreshDidNotHelp)
                #expect(!second.refreshDidNotHelp)
            }
        }
    }

    @Test func aTokenEndpointRefusingTheAccountIsACredentialRefusalNamingIt() async throws {
        try await TestDatabase.with { db in
            try await Self.withSimulator(trusting: false) { simulator, account in
                let source = Self.source(db, simulator, account, worker: "w1")
                do {
                    _ = try await source.currentToken()
                    Issue.record("a refused exchange returned a token")
                } catch let refusal as CredentialRefusal {
                    #expect(refusal.reason.contains("invalid_grant"), "\(refusal)")
                    #expect(refusal.reason.contains(Self.clientEmail))
                    #expect(!refusal.reason.contains("PRIVATE KEY"))
                }
                #expect(try await db.scalar("SELECT count(*) FROM push.provider_tokens") == 0)
            }
        }
    }
}

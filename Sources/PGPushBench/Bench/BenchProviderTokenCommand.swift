import ArgumentParser
import Foundation
import PGPushCore

/// `pgpush bench provider-token`: prints a fresh provider token (the bare JWT) so that an independent load
/// generator such as h2load can send to the simulator with the same credential as pgpush. Hidden: a JWT is a
/// bearer credential and has no business in an operator's terminal outside a benchmark.
struct BenchProviderTokenCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "provider-token",
        abstract: "Print a freshly signed provider token (JWT) for baseline load generators.",
        shouldDisplay: false
    )

    @Option(name: .customLong("team-id")) var teamID: String
    @Option(name: .customLong("key-id")) var keyID: String
    @Option(name: .customLong("key-file")) var keyFile: String

    func run() throws {
        let signer = try ProviderTokenSigner(teamID: teamID, keyID: keyID, keyFile: keyFile)
        print(try signer.sign(issuedAt: Date()).jwt)
    }
}

import Foundation
import PGPushCore

extension ProviderTokenSigner {
    /// A signer for the `.p8` key in `keyFile`, as the bench commands take it on their command line.
    init(teamID: String, keyID: String, keyFile: String) throws {
        guard let pem = try? String(contentsOfFile: keyFile, encoding: .utf8) else {
            throw PGPushError(.credentialUnreadable, "cannot read key file \(keyFile)")
        }
        try self.init(teamID: teamID, keyID: keyID, privateKeyPEM: pem)
    }
}

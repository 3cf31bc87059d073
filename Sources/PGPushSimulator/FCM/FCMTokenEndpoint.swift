import Foundation
import PGPushCore

/// The OAuth 2.0 token endpoint: exchanges a JWT-bearer assertion (RFC 7523) signed by a trusted service
/// account for an access token.
extension FCMSimulatorContext {
    func exchangeToken(contentType: String?, body: Data, now: Date) -> FCMSimulatorResponse {
        let response = decideTokenExchange(contentType: contentType, body: body, now: now)
        statistics.update {
            $0.tokenRequests += 1
            if response.status != 200 { $0.tokenExchangesRefused += 1 }
        }
        return response
    }

    private func decideTokenExchange(contentType: String?, body: Data, now: Date) -> FCMSimulatorResponse {
        let mediaType = contentType?.split(separator: ";").first?.trimmingCharacters(in: .whitespaces).lowercased()
        guard mediaType == FCMAssertionSigner.tokenRequestContentType else {
            return .oauthError("invalid_request", "Content-Type must be application/x-www-form-urlencoded")
        }
        guard body.count <= 64 * 1024, let form = Self.parseForm(body) else {
            return .oauthError("invalid_request", "The request body is not a form")
        }
        guard let grantType = form["grant_type"] else {
            return .oauthError("invalid_request", "Missing required parameter: grant_type")
        }
        guard grantType == FCMAssertionSigner.grantType else {
            return .oauthError("unsupported_grant_type", "Invalid grant_type")
        }
        guard let assertion = form["assertion"], !assertion.isEmpty else {
            return .oauthError("invalid_request", "Missing required parameter: assertion")
        }
        // Which account and audience to check against come from the unverified claims; the verifier checks
        // the signature before it looks at any claim.
        let claims = Self.unverifiedClaims(assertion)
        guard let issuer = claims?["iss"] as? String, let account = accounts[issuer] else {
            return .oauthError("invalid_grant", "Invalid grant: account not found")
        }
        let verifier = FCMAssertionVerifier(
            clientEmail: account.clientEmail,
            tokenURI: acceptedAudience(claimed: claims?["aud"] as? String),
            publicKey: account.publicKey,
            privateKeyID: account.privateKeyID,
            allowedClockSkew: configuration.assertionClockSkew.inSeconds)
        do {
            _ = try verifier.verify(assertion, now: now)
        } catch {
            return .oauthError(error.oauthError, error.description)
        }
        let (token, lifetime) = issueAccessToken(for: account, now: now)
        return FCMSimulatorResponse(
            status: 200,
            body: #"{"access_token":"# + FCMSimulatorJSON.quoted(token) + #","expires_in":\#(lifetime),"token_type":"Bearer"}"#)
    }

    /// The audience the assertion must carry: the configured one, or (without one) the claimed `aud` when it
    /// is an `https` URL of this server's token path on one of its host names. Anything else gets the
    /// canonical URI, which the claim then fails to match.
    func acceptedAudience(claimed: String?) -> String {
        if let exact = configuration.tokenAudience { return exact }
        if let claimed, let url = URL(string: claimed), url.scheme?.lowercased() == "https",
           let host = url.host?.lowercased(), audienceHosts.contains(host),
           url.path == configuration.tokenPath, url.query == nil, url.fragment == nil, url.user == nil {
            return claimed
        }
        return canonicalTokenURI
    }

    /// `https://127.0.0.1:<port><token path>`.
    var canonicalTokenURI: String {
        "https://127.0.0.1:\(boundPort.load(ordering: .relaxed))\(configuration.tokenPath)"
    }

    /// The claims object of a JWT, not verified.
    static func unverifiedClaims(_ jwt: String) -> [String: Any]? {
        let parts = jwt.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[1].utf8.count <= 16 * 1024 else { return nil }
        var base64 = parts[1].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        base64 += String(repeating: "=", count: (4 - base64.utf8.count % 4) % 4)
        guard let data = Data(base64Encoded: base64) else { return nil }
        return (try? JSONSerialization.jsonObject(with: data)) as? [String: Any]
    }

    /// `application/x-www-form-urlencoded` into a dictionary (the first value of a repeated name wins).
    static func parseForm(_ body: Data) -> [String: String]? {
        guard let text = String(data: body, encoding: .utf8) else { return nil }
        var form: [String: String] = [:]
        for pair in text.split(separator: "&", omittingEmptySubsequences: true) {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard let name = formDecoded(parts[0]) else { return nil }
            let value = parts.count == 2 ? formDecoded(parts[1]) : ""
            guard let value else { return nil }
            if form[name] == nil { form[name] = value }
        }
        return form
    }

    private static func formDecoded(_ text: Substring) -> String? {
        text.replacingOccurrences(of: "+", with: " ").removingPercentEncoding
    }
}

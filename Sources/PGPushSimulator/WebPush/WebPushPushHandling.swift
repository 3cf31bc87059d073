import Foundation
import NIOCore
import PGPushCore

/// What the simulated push service answers to one request (RFC 8030 §5, RFC 8292), the same over HTTP/2 and
/// HTTP/1.1. The checks, in order:
///
/// 1. `POST /push/<id>`: another path is 404 `NotFound`, another method 405 `MethodNotAllowed`.
/// 2. The registry: a gone id is 410 `Gone`, a not-found one 404 `NotFound`; an id the simulator never made
///    is 404 `NotFound` too.
/// 3. VAPID: no `Authorization` is 401 `MissingAuthorization`; one that ``VAPIDVerifier`` refuses (not
///    `vapid t=…, k=…`, bad signature, expired, `exp` more than 24 h ahead) is 401 `BadAuthorization`; a
///    valid token whose `aud` is not the endpoint's origin is 403 `BadAudience`; a `sub` Apple would refuse
///    (``VAPIDSubject``), or none, is 403 `BadJwtToken`; a key other than the one the subscription was made
///    with is 403 `VapidKeyMismatch`.
/// 4. Headers: `TTL` missing is 400 `MissingTTL`, not a non-negative integer 400 `BadTTL`; a bad `Urgency` is
///    400 `BadWebPushUrgency`; a bad `Topic` (over 32 characters or outside base64url) is 400
///    `BadWebPushTopic`.
/// 5. A body over ``WebPushSimulatorConfiguration/maximumBodySize`` is 413 `PayloadTooLarge`; a body without
///    `Content-Encoding: aes128gcm` is 400 `BadContentEncoding`.
/// 6. The injected faults (429, 503, 500).
/// 7. Decryption with the subscription's keys: a body that does not decrypt is 400 `DecryptionFailed`.
///
/// Accepted: 201 with `Location` and `TTL`, and a ledger entry.
extension WebPushSimulatorContext {
    static let pushPathPrefix = "/push/"

    func answer(_ request: WebPushRequest, dynamic: Dynamic, now: Date) -> WebPushSimulatorResponse {
        let fullPath = request.path
        let path = fullPath.utf8.firstIndex(of: UInt8(ascii: "?")).map { String(fullPath[..<$0]) } ?? fullPath
        guard path.hasPrefix(Self.pushPathPrefix) else { return .refusal(404, "NotFound", "No such resource") }
        let id = String(path.dropFirst(Self.pushPathPrefix.count))
        guard !id.isEmpty, !id.contains("/") else { return .refusal(404, "NotFound", "No such resource") }
        guard request.method == "POST" else { return .refusal(405, "MethodNotAllowed", "Push with POST") }
        statistics.update { $0.pushRequests += 1 }

        switch dynamic.registry.outcome(forID: id) {
        case .gone: return .refusal(410, "Gone", "The subscription has expired or was unsubscribed")
        case .notFound: return .refusal(404, "NotFound", "No such subscription")
        case .live: break
        }
        guard let subscription = subscription(id: id) else {
            statistics.update { $0.unknownSubscriptions += 1 }
            return .refusal(404, "NotFound", "No such subscription")
        }

        let claims: VAPIDVerifier.Claims
        switch authorize(request, subscription: subscription, now: now) {
        case .failure(let refusal): return refusal.response
        case .success(let verified): claims = verified
        }

        guard let ttlText = request.headers["ttl"] else { return .refusal(400, "MissingTTL", "The TTL header is required") }
        guard let ttl = Self.nonNegativeInteger(ttlText) else {
            return .refusal(400, "BadTTL", "TTL must be a non-negative integer of seconds")
        }
        var urgency: WebPushUrgency?
        if let text = request.headers["urgency"] {
            guard let value = WebPushUrgency(rawValue: text.lowercased()) else {
                return .refusal(400, "BadWebPushUrgency", "Urgency must be very-low, low, normal or high")
            }
            urgency = value
        }
        let topic = request.headers["topic"]
        if let topic, !WebPushTopic.isValid(topic) {
            return .refusal(400, "BadWebPushTopic", "Topic must be 1 to 32 characters of the base64url alphabet")
        }
        if request.bodyTruncated || request.body.readableBytes > configuration.maximumBodySize {
            return .refusal(413, "PayloadTooLarge", "The body is larger than \(configuration.maximumBodySize) bytes")
        }
        let hasBody = request.body.readableBytes > 0
        if hasBody, request.headers["content-encoding"]?.lowercased() != WebPushEncryption.contentEncoding {
            return .refusal(400, "BadContentEncoding", "A body must be sent with Content-Encoding: aes128gcm")
        }

        if let fault = injectedFault(subscriptionID: id, faults: dynamic.faults) { return fault }

        var plaintext: [UInt8] = []
        if hasBody {
            do {
                plaintext = try WebPushEncryption.decrypt(
                    Array(request.body.readableBytesView), privateKey: subscription.privateKey, auth: subscription.auth)
            } catch {
                return .refusal(400, "DecryptionFailed", error.message)
            }
        }

        let keptTTL = min(ttl, configuration.maximumTTL)
        let location = nextLocation(origin: subscription.origin)
        var response = WebPushSimulatorResponse(status: 201, location: location, ttl: keptTTL)
        if configuration.ledgerEnabled {
            response.ledgerEntry = WebPushSimulatorLedgerEntry(
                subscriptionID: id, location: location,
                plaintext: configuration.ledgerKeepsPayloads ? plaintext : nil,
                plaintextSHA256: WebPushSimulatorLedger.sha256Hex(plaintext), plaintextLength: plaintext.count,
                ttl: ttl, urgency: urgency, topic: topic, httpVersion: request.version,
                applicationServerKey: claims.applicationServerKey, subject: claims.subject, receivedAt: now)
        }
        return response
    }

    /// The VAPID checks of step 3.
    private func authorize(_ request: WebPushRequest, subscription: KeptSubscription,
                           now: Date) -> Result<VAPIDVerifier.Claims, WebPushRefusal> {
        guard let authorization = request.headers["authorization"] else {
            return .failure(.init(.refusal(401, "MissingAuthorization", "A VAPID Authorization header is required")))
        }
        let claims: VAPIDVerifier.Claims
        do {
            claims = try VAPIDVerifier.verify(authorization: authorization, now: now)
        } catch {
            return .failure(.init(.refusal(401, "BadAuthorization", error.message)))
        }
        guard let audience = try? WebPushOrigin(parsing: claims.audience), audience == subscription.origin else {
            return .failure(.init(.refusal(
                403, "BadAudience", "The VAPID token's aud must be this push service's origin, \(subscription.origin)")))
        }
        guard let subject = claims.subject else {
            return .failure(.init(.refusal(403, "BadJwtToken", "The VAPID token has no sub claim")))
        }
        do {
            _ = try VAPIDSubject(subject)
        } catch {
            return .failure(.init(.refusal(403, "BadJwtToken", error.message)))
        }
        if let pinned = subscription.pinnedKey, WebPushBase64URL.decode(claims.applicationServerKey) != pinned {
            return .failure(.init(.refusal(
                403, "VapidKeyMismatch", "The VAPID key is not the applicationServerKey the subscription was made with")))
        }
        return .success(claims)
    }

    /// Digits only (no sign, no spaces), within `Int`.
    static func nonNegativeInteger(_ text: String) -> Int? {
        guard !text.isEmpty, text.utf8.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }) else { return nil }
        return Int(text)
    }
}

/// A refusal as an `Error`, for `Result`.
struct WebPushRefusal: Error {
    var response: WebPushSimulatorResponse
    init(_ response: WebPushSimulatorResponse) { self.response = response }
}

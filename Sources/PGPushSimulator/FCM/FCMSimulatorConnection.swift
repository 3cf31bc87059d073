import Foundation
import NIOCore
import NIOHPACK
import NIOHTTP2

/// One FCM client connection on top of the shared ``SimulatorTransport``: routes each request to the token
/// endpoint or `messages:send`, applies the faults, and writes Google-shaped answers.
///
/// Confined to the connection's event loop, hence `@unchecked Sendable` (see ``SimulatorTransport``).
final class FCMSimulatorConnection: SimulatorRequestHandler, @unchecked Sendable {
    typealias Response = FCMSimulatorResponse

    let server: FCMSimulatorContext
    let transport: SimulatorTransport
    private var validationMemo = FCMValidationMemo()
    /// The last `authorization` header accepted on this connection and the token it names, so that a sender's
    /// stream of requests with one access token looks it up once (its expiry is still checked every time).
    private var lastAuthorization: (header: String, token: FCMSimulatorContext.IssuedToken)?

    init(server: FCMSimulatorContext, channel: Channel, abruptCloser: AbruptCloseHandler, number: Int) {
        self.server = server
        let seed = server.configuration.faults.seed
        self.transport = server.registerConnection { limit in
            SimulatorTransport(channel: channel, abruptCloser: abruptCloser, statistics: server.statistics,
                               number: number, advertisedLimit: limit, latencySeed: seed)
        }
    }

    /// Bodies larger than this are refused unread; FCM messages are at most 4 KB.
    static let maximumBodySize = 64 * 1024

    func handleRequest(streamID: Int, headers: HPACKHeaders, body: ByteBuffer) -> SimulatorStreamAction<FCMSimulatorResponse> {
        let dynamic = server.snapshot
        let faults = dynamic.faults
        let requestNumber = server.counters.nextRequestNumber()
        let connectionFault = transport.connectionFault(requestNumber: requestNumber, faults: faults.connectionFaults)
        if case .leaveUnanswered = connectionFault { return .leaveUnanswered }

        let now = server.configuration.now()
        let response = route(headers: headers, body: body, dynamic: dynamic, now: now)
        if case .goAwayAfterAnswer = connectionFault { transport.gracefulGoAway() }
        return .respond(response, delay: transport.latency(faults.latency))
    }

    private func route(headers: HPACKHeaders, body: ByteBuffer, dynamic: FCMSimulatorContext.Dynamic,
                       now: Date) -> FCMSimulatorResponse {
        let method = headers.first(name: ":method") ?? ""
        let fullPath = headers.first(name: ":path") ?? ""
        let path = fullPath.utf8.firstIndex(of: UInt8(ascii: "?")).map { String(fullPath[..<$0]) } ?? fullPath
        if method == "POST" && path == server.configuration.tokenPath {
            guard body.readableBytes <= Self.maximumBodySize else {
                return .oauthError("invalid_request", "The request body is too large")
            }
            return server.exchangeToken(contentType: headers.first(name: "content-type"),
                                        body: Data(body.readableBytesView), now: now)
        }
        if method == "POST", let projectID = Self.sendProject(path) {
            server.statistics.update { $0.sendRequests += 1 }
            return send(projectID: projectID, headers: headers, body: body, dynamic: dynamic, now: now)
        }
        return .error(FCMSimulatorError(
            httpStatus: 404, status: "NOT_FOUND", message: "The requested URL was not found on this server."))
    }

    /// `{project_id}` of `/v1/projects/{project_id}/messages:send`.
    static func sendProject(_ path: String) -> String? {
        // Compared as bytes: this runs for every request, and the path is ASCII when it matches at all.
        let bytes = path.utf8, prefix = "/v1/projects/".utf8, suffix = "/messages:send".utf8
        guard bytes.count > prefix.count + suffix.count, bytes.starts(with: prefix), bytes.reversed().starts(with: suffix.reversed())
        else { return nil }
        let project = bytes.dropFirst(prefix.count).dropLast(suffix.count)
        guard !project.contains(UInt8(ascii: "/")) else { return nil }
        return String(decoding: project, as: UTF8.self)
    }

    // MARK: messages:send

    private func send(projectID: String, headers: HPACKHeaders, body: ByteBuffer,
                      dynamic: FCMSimulatorContext.Dynamic, now: Date) -> FCMSimulatorResponse {
        if let refusal = authorize(headers: headers, projectID: projectID, now: now) { return refusal }

        guard body.readableBytes <= Self.maximumBodySize else {
            return .error(.invalidArgument(field: "message", "Message is too big"))
        }
        let configuration = server.configuration
        let keepMessage = configuration.ledgerEnabled && configuration.ledgerKeepsMessages
        let request: FCMValidatedSend
        switch validationMemo.validate(body, keepMessage: keepMessage) {
        case .failure(let error): return .error(error)
        case .success(let validated): request = validated
        }

        switch dynamic.registry.outcome(forToken: request.token, projectID: projectID) {
        case .valid: break
        case .unregistered:
            return .error(FCMSimulatorError(httpStatus: 404, status: "NOT_FOUND", message: "Requested entity was not found.",
                                            errorCode: "UNREGISTERED"))
        case .senderIDMismatch:
            return .error(FCMSimulatorError(httpStatus: 403, status: "PERMISSION_DENIED", message: "SenderId mismatch",
                                            errorCode: "SENDER_ID_MISMATCH"))
        case .invalid:
            return .error(.invalidToken)
        case .thirdPartyAuthError:
            return .error(FCMSimulatorError(httpStatus: 401, status: "UNAUTHENTICATED",
                                            message: "Auth error from APNS or Web Push Service",
                                            errorCode: "THIRD_PARTY_AUTH_ERROR"))
        }

        if let fault = injectedFault(token: request.token, faults: dynamic.faults) { return .error(fault) }

        if request.validateOnly {
            server.statistics.update { $0.validatedOnly += 1 }
            return FCMSimulatorResponse(
                status: 200, body: #"{"name":"# + FCMSimulatorJSON.quoted("projects/\(projectID)/messages/fake_message_id") + "}")
        }
        let name = "projects/\(projectID)/messages/\(server.nextMessageID(now: now))"
        var response = FCMSimulatorResponse(status: 200, body: #"{"name":"# + FCMSimulatorJSON.quoted(name) + "}")
        if configuration.ledgerEnabled {
            response.ledgerEntry = FCMSimulatorLedgerEntry(
                token: request.token, projectID: projectID, name: name, body: request.messageJSON, receivedAt: now)
        }
        return response
    }

    /// `nil` when the bearer token is one this simulator issued, unexpired, to an account of `projectID`.
    private func authorize(headers: HPACKHeaders, projectID: String, now: Date) -> FCMSimulatorResponse? {
        guard let authorization = headers.first(name: "authorization") else {
            return unauthenticated("Request is missing required authentication credential. Expected OAuth 2 access token, login cookie or other valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project.")
        }
        guard let issued = accessToken(authorization), issued.expiresAt > now else {
            return unauthenticated("Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project.")
        }
        guard issued.projectID == projectID else {
            return .error(FCMSimulatorError(
                httpStatus: 403, status: "PERMISSION_DENIED",
                message: "Permission 'cloudmessaging.messages.create' denied on resource '//cloudresourcemanager.googleapis.com/projects/\(projectID)' (or it may not exist)."))
        }
        return nil
    }

    private func accessToken(_ authorization: String) -> FCMSimulatorContext.IssuedToken? {
        if let last = lastAuthorization, last.header == authorization { return last.token }
        let parts = authorization.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].lowercased() == "bearer",
              let issued = server.lookUpAccessToken(parts[1].trimmingCharacters(in: .whitespaces))
        else { return nil }
        lastAuthorization = (authorization, issued)
        return issued
    }

    private func unauthenticated(_ message: String) -> FCMSimulatorResponse {
        var response = FCMSimulatorResponse.error(FCMSimulatorError(httpStatus: 401, status: "UNAUTHENTICATED", message: message))
        response.bearerChallenge = true
        return response
    }

    /// The seeded per-request faults: 429, then 503, then 500, each drawn independently per token and attempt.
    private func injectedFault(token: String, faults: FCMSimulatorFaults) -> FCMSimulatorError? {
        guard faults.needsAttemptCounting else { return nil }
        let attempt = UInt64(server.counters.nextAttempt(forToken: token))
        func drawn(_ rate: Double, salt: UInt64) -> Bool {
            rate > 0 && FaultHash.unit(FaultHash.hash(token, seed: faults.seed, salt: salt << 32 &+ attempt)) < rate
        }
        if drawn(faults.quotaExceededRate, salt: 429) {
            return FCMSimulatorError(
                httpStatus: 429, status: "RESOURCE_EXHAUSTED",
                message: "Quota exceeded for quota metric 'Send requests' of service 'fcm.googleapis.com'.",
                errorCode: "QUOTA_EXCEEDED", retryAfterSeconds: faults.quotaExceededRetryAfterSeconds)
        }
        if drawn(faults.unavailableRate, salt: 503) {
            return FCMSimulatorError(httpStatus: 503, status: "UNAVAILABLE", message: "The service is currently unavailable.",
                                     errorCode: "UNAVAILABLE", retryAfterSeconds: faults.unavailableRetryAfterSeconds)
        }
        if drawn(faults.internalErrorRate, salt: 500) {
            return FCMSimulatorError(httpStatus: 500, status: "INTERNAL", message: "Internal error encountered.",
                                     errorCode: "INTERNAL")
        }
        return nil
    }

    // MARK: Writing answers

    func write(_ response: FCMSimulatorResponse, streamID: Int, context: ChannelHandlerContext) {
        var headers = HPACKHeaders()
        headers.reserveCapacity(4)
        headers.add(name: ":status", value: String(response.status))
        headers.add(name: "content-type", value: "application/json; charset=UTF-8")
        if let seconds = response.retryAfterSeconds { headers.add(name: "retry-after", value: String(seconds)) }
        if response.bearerChallenge {
            headers.add(name: "www-authenticate", value: #"Bearer realm="https://accounts.google.com/""#)
        }
        let buffer = context.channel.allocator.buffer(string: response.body)
        context.write(NIOAny(HTTP2Frame.FramePayload.headers(.init(headers: headers))), promise: nil)
        context.write(NIOAny(HTTP2Frame.FramePayload.data(.init(data: .byteBuffer(buffer), endStream: true))), promise: nil)
        server.statistics.recordResponse(status: response.status, code: response.code)
        if let entry = response.ledgerEntry { server.ledger.record(entry) }
    }
}

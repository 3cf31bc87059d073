import Foundation
import Logging
import PGPushTransport
import PGPushCore
import PGPushStore
import ServiceLifecycle
import Synchronization

/// Sends one claimed chunk and turns every answer into its completion: final outcomes, retries with backoff,
/// tokens given back unsent, and dead tokens for the pruner. It writes nothing itself; the worker records the
/// completion in one transaction.
struct ChunkProcessor: Sendable {
    /// Claims after which a chunk is poison (``WorkerConfiguration/maximumClaims``).
    let maximumClaims: Int
    let retryPolicy: RetryPolicy
    let store: any WorkerStore
    let registry: any AppSenders
    let appHealth: AppHealth
    let metrics: WorkerMetrics
    let logger: Logger
    /// Once it is stopping (graceful shutdown), no new request is started and the rest is given back.
    let lifecycle: WorkerLifecycle
    /// The time of day (sent, expired, due again) and the backoff's jitter.
    var runtime: WorkerRuntime = .system

    /// Sends the chunk's tokens and returns its completion. `room` is told of every token that leaves the
    /// worker's hands (answered); the caller frees the rest when this returns. A token is not sent once the
    /// job's `expires_at` has passed (recorded as expired) or the job was cancelled (dropped).
    ///
    /// The async functions here only hold what lives across a suspension; everything else happens in
    /// synchronous helpers kept out of line. A task's frames are allocated per chunk, and with a chunk per
    /// one-token job thousands of them are alive at once. Inlined, the bookkeeping made this function's frame
    /// 11 KB (4 KB out of line), and a burst of one-token jobs cost the worker 60 MB more.
    func process(_ chunk: ClaimedChunk, room: RoomReservation, verdicts: JobVerdicts) async throws -> ChunkCompletion {
        // A key range is read from the database, cut short by a shutdown (the caller gives the chunk back
        // unsent). A token list is in the claimed row already: the shutdown watch (a task group of two child
        // tasks) would cost a one-token job more than its send does.
        // A job with per-device content reads each device's locale and badge step with its token, once the
        // chunk is known to be sent: a cancelled or failed job's chunk moves no counter.
        var tokens: [String]
        var contents: [DeviceContent?]?
        if chunk.job.isPersonal && sends(chunk, verdicts: verdicts) {
            let personal = try await personalTokens(of: chunk)
            (tokens, contents) = (personal.tokens, personal.contents)
        } else {
            tokens = chunk.kind == .tokens ? chunk.tokens : try await readTokens(of: chunk)
        }
        // A person who reached the job's category cap gets an outcome instead of the notification.
        var capped: [String] = []
        if chunk.job.frequencyCap != nil && sends(chunk, verdicts: verdicts) {
            capped = try await takeFrequencySlots(for: chunk, tokens: tokens)
            if !capped.isEmpty {
                let cappedSet = Set(capped)
                let kept = tokens.indices.filter { !cappedSet.contains(tokens[$0]) }
                contents = contents.map { all in kept.map { all[$0] } }
                tokens = kept.map { tokens[$0] }
            }
        }
        var completion = try await send(chunk, tokens: tokens, contents: contents, room: room, verdicts: verdicts)
        if !capped.isEmpty {
            let now = runtime.now()
            completion.outcomes += capped.map { notSent($0, reason: ChunkCompletion.frequencyCappedReason, chunk: chunk, at: now) }
            completion.readTokens = completion.readTokens.map { $0 + capped.count }
        }
        return completion
    }

    /// Sends the tokens of a chunk that are to go out, and waits for their answers.
    private func send(
        _ chunk: ClaimedChunk, tokens: [String], contents: [DeviceContent?]?, room: RoomReservation, verdicts: JobVerdicts
    ) async throws -> ChunkCompletion {
        // A web subscription's message is encrypted for its keys, read with the chunk.
        let webKeys = chunk.platform == .web && sends(chunk, verdicts: verdicts) ? try await readWebKeys(of: chunk, tokens: tokens) : [:]
        switch await start(chunk, tokens: tokens, contents: contents, webKeys: webKeys, room: room, verdicts: verdicts) {
        case .settled(let completion):
            return completion
        case .sending(let sending):
            return finish(sending, answers: await sending.answers.all())
        }
    }

    /// A chunk whose requests are out: what its completion needs once the last answer is in
    /// (``finish(_:answers:)``). It holds its app's sender checked out until then.
    struct Sending: Sendable {
        let chunk: ClaimedChunk
        let readTokens: Int
        let tally: Tally
        let provider: ProviderRequests
        let sender: AppSender
        let answers: ChunkAnswers
    }

    enum Start: Sendable {
        /// Nothing was sent, or nothing is left to wait for: the completion is ready.
        case settled(ChunkCompletion)
        case sending(Sending)
    }

    /// Starts the chunk's requests, each as the app's limits let it, without waiting for their answers.
    /// `checkedOut` is the chunk's sender when the caller has checked it out already (a batch of one app's
    /// chunks); the chunk checks it in when done, as one it checked out itself. With an `outbox` of the
    /// caller's, the chunk's last requests may still be held in it on return: the caller sends them.
    func start(
        _ chunk: ClaimedChunk, tokens: [String], contents: [DeviceContent?]? = nil, webKeys: [String: WebPushKeys] = [:],
        room: RoomReservation,
        verdicts: JobVerdicts, checkedOut: AppSender? = nil, outbox callersOutbox: PushOutbox? = nil
    ) async -> Start {
        if let settled = settledWithoutSending(chunk, tokens: tokens, verdicts: verdicts) {
            checkedOut?.checkIn()
            return .settled(settled)
        }
        let role: SenderRole = chunk.job.channelID == nil ? .push : .broadcasts
        let sender: AppSender
        if let checkedOut {
            sender = checkedOut
        } else {
            guard let fresh = await registry.checkOutSender(for: chunk.appID, platform: chunk.platform, role: role) else {
                return .settled(givenBack(chunk, tokens: tokens))
            }
            sender = fresh
        }
        guard !appHealth.isPaused(chunk.appID, platform: chunk.platform) else {
            sender.checkIn()
            return .settled(givenBack(chunk, tokens: tokens))
        }
        guard let provider = try? ProviderRequests(chunk: chunk, sender: sender, webKeys: webKeys) else {
            sender.checkIn()
            // Validated at enqueue, so only a damaged row gets here: fail the job's tokens, send nothing.
            return .settled(notSent(chunk, tokens: tokens, reason: ProviderRequests.invalidFCMMessage))
        }
        var tally = Tally()
        let answers = ChunkAnswers(capacity: tokens.count)
        let outbox = callersOutbox ?? PushOutbox()
        for (index, token) in tokens.enumerated() {
            let step = nextStep(for: token, chunk: chunk, verdicts: verdicts, into: &tally)
            if step == .stop { break }
            if step == .skip { continue }
            // The app's adaptive limit: a misconfigured app gets only a handful of requests out before its
            // errors pause it, and 429/503 slow every chunk of the app down. Higher job priorities go first.
            if !sender.gate.tryAcquire() {
                // Held requests hold permits: they must leave before this waits for one, or nothing frees it.
                await outbox.send()
                await sender.gate.acquire(priority: chunk.priority)
            }
            // Checked again right before it goes out: a chunk waiting on the limit, a rate limit or a slow APNs
            // can outlive its job's expiry or a cancel, or see the shutdown or the app's pause begin.
            var next = nextStep(for: token, chunk: chunk, verdicts: verdicts, into: &tally)
            if next == .send, sender.rateLimiter != nil || sender.projectQuota != nil {
                await outbox.send()
                do {
                    try await Self.waitForRate(sender)
                    next = nextStep(for: token, chunk: chunk, verdicts: verdicts, into: &tally)
                } catch {
                    tally.unsent.append(token)
                    next = .skip
                }
            }
            guard next == .send else {
                sender.gate.release(overloaded: false, succeeded: false)
                if next == .stop { break } else { continue }
            }
            let (request, onOutcome) = requestAndAnswer(
                for: token, content: contents?[index] ?? nil, chunk: chunk, provider: provider, sender: sender, room: room,
                verdicts: verdicts, answers: answers)
            await outbox.add(PushSubmission(request: request, onOutcome: onOutcome), to: sender.pool)
        }
        if callersOutbox == nil { await outbox.send() }
        return .sending(Sending(chunk: chunk, readTokens: tokens.count, tally: tally, provider: provider, sender: sender, answers: answers))
    }

    /// The completion of a chunk whose answers are all in; hands its sender back.
    func finish(_ sending: Sending, answers: [Answer]) -> ChunkCompletion {
        defer { sending.sender.checkIn() }
        return settle(answers, tally: sending.tally, chunk: sending.chunk, provider: sending.provider, readTokens: sending.readTokens)
    }

    @inline(never)
    private func readTokens(of chunk: ClaimedChunk) async throws -> [String] {
        try await cancelWhenGracefulShutdown { try await store.tokens(of: chunk) }
    }

    @inline(never)
    private func readWebKeys(of chunk: ClaimedChunk, tokens: [String]) async throws -> [String: WebPushKeys] {
        try await cancelWhenGracefulShutdown { try await store.webPushKeys(appID: chunk.appID, tokens: tokens) }
    }

    @inline(never)
    private func takeFrequencySlots(for chunk: ClaimedChunk, tokens: [String]) async throws -> [String] {
        guard let category = chunk.job.category, let cap = chunk.job.frequencyCap else { return [] }
        return try await cancelWhenGracefulShutdown {
            try await store.takeFrequencySlots(appID: chunk.appID, jobID: chunk.jobID, category: category, cap: cap, tokens: tokens)
        }
    }

    @inline(never)
    private func personalTokens(of chunk: ClaimedChunk) async throws -> PersonalTokens {
        try await cancelWhenGracefulShutdown { try await store.personalTokens(of: chunk) }
    }

    /// Whether the chunk is to be sent at all: the one rule ``settledWithoutSending(_:tokens:verdicts:)`` settles
    /// the other cases by.
    private enum Disposition {
        case send
        /// Its leases kept expiring (``maximumClaims``).
        case poison
        case cancelled
        case failed(reason: String)
    }

    private func disposition(of chunk: ClaimedChunk, verdicts: JobVerdicts) -> Disposition {
        if chunk.claims > maximumClaims { return .poison }
        if verdicts.isCancelled(chunk.jobID) { return .cancelled }
        if let reason = chunk.jobFailure ?? verdicts.failure(of: chunk.jobID, platform: chunk.platform) { return .failed(reason: reason) }
        return .send
    }

    private func sends(_ chunk: ClaimedChunk, verdicts: JobVerdicts) -> Bool {
        if case .send = disposition(of: chunk, verdicts: verdicts) { return true }
        return false
    }

    /// Waits for the app's rate limit and its FCM project's quota, if it has them.
    @inline(never)
    private static func waitForRate(_ sender: AppSender) async throws {
        try await sender.rateLimiter?.acquire()
        try await sender.projectQuota?.acquire()
    }

    /// The completion of a chunk that is not sent at all (its job cancelled or failed, or the chunk poisoned),
    /// or nil when it is to be sent.
    @inline(never)
    private func settledWithoutSending(_ chunk: ClaimedChunk, tokens: [String], verdicts: JobVerdicts) -> ChunkCompletion? {
        switch disposition(of: chunk, verdicts: verdicts) {
        case .send:
            return nil
        case .poison:
            // Its leases kept expiring: whatever kills the workers holding it must not kill the next one too.
            logger.warning("poison chunk recorded as failed", metadata: [
                "job": "\(chunk.jobID)", "app": "\(chunk.appID)", "chunk": "\(chunk.id)", "claims": "\(chunk.claims)",
            ])
            return notSent(chunk, tokens: tokens, reason: "LeaseExpired")
        case .cancelled:
            return ChunkCompletion(chunk: chunk, readTokens: tokens.count)
        case .failed(let reason):
            return notSent(chunk, tokens: tokens, reason: reason)
        }
    }

    /// Every token goes back to the queue unsent, on the attempt it was on: the app has no sender or is paused.
    @inline(never)
    private func givenBack(_ chunk: ClaimedChunk, tokens: [String]) -> ChunkCompletion {
        var completion = ChunkCompletion(chunk: chunk, readTokens: tokens.count)
        completion.requeued = [RequeuedTokens(tokens: tokens, attempt: chunk.attempt, notBefore: runtime.now(), lastReason: chunk.lastReason)]
        return completion
    }

    /// Every token is recorded as not sent, with `reason`: the chunk is poison, or its job failed.
    @inline(never)
    private func notSent(_ chunk: ClaimedChunk, tokens: [String], reason: String) -> ChunkCompletion {
        var completion = ChunkCompletion(chunk: chunk, readTokens: tokens.count)
        let now = runtime.now()
        completion.outcomes = tokens.map { notSent($0, reason: reason, chunk: chunk, at: now) }
        return completion
    }

    private enum Step {
        /// Send the token.
        case send
        /// Not this token: it is recorded in the tally (expired, its job failed, or given back unsent).
        case skip
        /// Not this token nor the rest: the job was cancelled.
        case stop
    }

    /// Whether a token may go out now: its job cancelled stops the chunk; its job failed, the job expired,
    /// a shutdown or the app's pause record the token in the tally instead.
    @inline(never)
    private func nextStep(for token: String, chunk: ClaimedChunk, verdicts: JobVerdicts, into tally: inout Tally) -> Step {
        if verdicts.isCancelled(chunk.jobID) { return .stop }
        if let reason = verdicts.failure(of: chunk.jobID, platform: chunk.platform) {
            tally.outcomes.append(notSent(token, reason: reason, chunk: chunk, at: runtime.now()))
            return .skip
        }
        if lifecycle.isStopping || appHealth.isPaused(chunk.appID, platform: chunk.platform) {
            tally.unsent.append(token)
            return .skip
        }
        if let expiresAt = chunk.job.expiresAt, case let now = runtime.now(), expiresAt <= now {
            tally.outcomes.append(notSent(token, reason: ChunkCompletion.expiredReason, chunk: chunk, at: now))
            return .skip
        }
        return .send
    }

    /// The request for one token, and what its answer does: judge the app's health as answers arrive (a
    /// misconfigured app must stop sending after its first few errors), return the permit with what the
    /// answer said about the provider's load, free the token's room, and keep the answer for the completion.
    @inline(never)
    private func requestAndAnswer(
        for token: String, content: DeviceContent?, chunk: ClaimedChunk, provider: ProviderRequests, sender: AppSender,
        room: RoomReservation, verdicts: JobVerdicts, answers: ChunkAnswers
    ) -> (any PushRequest, @Sendable (ProviderOutcome) -> Void) {
        let deliveryID = DeliveryID.make(jobID: chunk.jobID, token: token)
        let request = provider.request(for: token, deliveryID: deliveryID, content: content)
        let (gate, metrics, appHealth, appID, jobID) = (sender.gate, self.metrics, self.appHealth, chunk.appID, chunk.jobID)
        let started = ContinuousClock.now
        let now = runtime.now
        answers.expectOne()
        return (request, { outcome in
            let answered = ContinuousClock.now
            metrics.sendDuration.record(duration: answered - started)
            let status = outcome.status
            if provider.provider == .webpush {
                metrics.recordWebPush(origin: WorkerMetrics.webPushOrigin(of: token), status: status)
            }
            let (classification, retryAfter) = provider.classify(outcome)
            switch classification {
            case .configurationError(let reason): appHealth.recordConfigurationError(appID, provider: provider.provider, reason: reason)
            case .jobError(let reason) where provider.provider == .webpush:
                verdicts.recordWebJobError(jobID, reason: reason)
            case .jobError(let reason):
                if verdicts.recordJobError(jobID, reason: reason, immediately: provider.isBroadcast) {
                    metrics.jobsFailedByJobError.increment()
                }
            case .delivered: appHealth.recordSuccess(appID, provider: provider.provider)
            default: break
            }
            // A deadline that passed means APNs (or the path to it) is saturated as surely as a 503 does.
            let overloaded = status == 429 || status == 503 || outcome == .noResponse(.timeout)
            gate.release(overloaded: overloaded, succeeded: status == 200, roundTrip: answered - started, now: answered)
            room.releaseOne()
            answers.add(Answer(token: token, deliveryID: deliveryID, outcome: outcome, classification: classification, sentAt: now(),
                               retryAfter: retryAfter))
        })
    }

    /// Turns the chunk's answers and what was settled without sending into its completion.
    @inline(never)
    private func settle(
        _ answers: [Answer], tally: Tally, chunk: ClaimedChunk, provider: ProviderRequests, readTokens: Int
    ) -> ChunkCompletion {
        var tally = tally
        for answer in answers {
            handle(answer, chunk: chunk, job: chunk.job, into: &tally)
        }
        metrics.recordSends(app: chunk.appID, provider: provider.isBroadcast ? .apnsBroadcast : chunk.platform.provider, tally.sends)
        return finish(tally, chunk: chunk, job: chunk.job, completion: ChunkCompletion(chunk: chunk, readTokens: readTokens))
    }

    /// A token recorded without a request (status 0) and with `reason`: its job failed or expired, or the chunk
    /// is poison.
    private func notSent(_ token: String, reason: String, chunk: ClaimedChunk, at date: Date) -> FinalOutcome {
        FinalOutcome(token: token, status: 0, reason: reason, deliveryID: DeliveryID.make(jobID: chunk.jobID, token: token),
                     attempt: chunk.attempt, sentAt: date)
    }

    /// One request's answer, classified once where it arrived.
    struct Answer: Sendable {
        var token: String
        var deliveryID: UUID
        var outcome: ProviderOutcome
        var classification: DeliveryClass
        var sentAt: Date
        /// How long the provider asked us to wait before trying again (FCM's `Retry-After`).
        var retryAfter: Duration?
    }

    /// What the answers of one chunk add up to.
    struct Tally: Sendable {
        var outcomes: [FinalOutcome] = []
        var transient: [(token: String, status: Int, reason: String)] = []
        /// The longest `Retry-After` among the transient failures.
        var retryAfter: Duration?
        var configurationErrors: [String] = []
        var unsent: [String] = []
        var prune: [PruneCandidate] = []
        var answered = 0
        var badDeviceTokens = 0
        /// Sends by (status, reason), added to the metrics once per chunk.
        var sends: [WorkerMetrics.SendKey: Int] = [:]
    }

    private func handle(_ answer: Answer, chunk: ClaimedChunk, job: JobDetails, into tally: inout Tally) {
        let (token, outcome, sentAt, classification, deliveryID) = (answer.token, answer.outcome, answer.sentAt, answer.classification, answer.deliveryID)
        let status = outcome.status
        tally.sends[WorkerMetrics.SendKey(status: status, reason: classification.reasonForRecord), default: 0] += 1
        if case .response = outcome { tally.answered += 1 }
        func final(_ reason: String?) {
            tally.outcomes.append(FinalOutcome(token: token, status: status, reason: reason, deliveryID: deliveryID, attempt: chunk.attempt, sentAt: sentAt))
        }
        switch classification {
        case .delivered:
            final(nil)
        case .tokenDead(let reason, let timestamp):
            final(reason)
            // FCM gives no timestamp: the answer's time stands in, so a device re-registered after this send
            // is kept, as with APNs' timestamp.
            tally.prune.append(PruneCandidate(
                token: token, status: status, reason: reason,
                apnsTimestamp: timestamp.map { Date(timeIntervalSince1970: Double($0) / 1000) } ?? fcmAnswerTime(chunk, sentAt)))
        case .tokenWrongForTopicOrEnvironment(let reason):
            final(reason)
            // What the app's safety valve counts: a mass of these means the wrong APNs environment or the
            // wrong Firebase project, not dead devices.
            if ProviderRequests.wrongCredentialReasons.contains(reason) { tally.badDeviceTokens += 1 }
            tally.prune.append(PruneCandidate(token: token, status: status, reason: reason, apnsTimestamp: fcmAnswerTime(chunk, sentAt)))
        case .permanentFailure(let reason), .jobError(let reason):
            final(reason)
        case .configurationError:
            // The app is misconfigured, not this token: give it back; the app is paused (see AppHealth).
            tally.configurationErrors.append(token)
        case .retryLater(let reason, _), .refreshProviderTokenAndRetry(let reason):
            if classification.isProviderTokenUpdateStorm { metrics.providerTokenStorms.increment() }
            tally.transient.append((token, status, reason))
            if let wait = answer.retryAfter { tally.retryAfter = max(tally.retryAfter ?? wait, wait) }
        }
    }

    static let maximumRetryAfterSeconds: Int64 = 3600

    /// The time an FCM or Web Push answer stands in for APNs' token timestamp in the pruner's re-registration
    /// rule: neither says when the token was last known valid.
    private func fcmAnswerTime(_ chunk: ClaimedChunk, _ sentAt: Date) -> Date? {
        chunk.platform == .ios ? nil : sentAt
    }

    private func finish(_ tally: Tally, chunk: ClaimedChunk, job: JobDetails, completion: ChunkCompletion) -> ChunkCompletion {
        var completion = completion
        let now = runtime.now()
        completion.outcomes = tally.outcomes
        completion.pruneCandidates = tally.prune
        completion.answered = tally.answered
        completion.badDeviceTokens = tally.badDeviceTokens

        let givenBack = tally.unsent + tally.configurationErrors
        if !givenBack.isEmpty {
            completion.requeued.append(RequeuedTokens(tokens: givenBack, attempt: chunk.attempt, notBefore: now, lastReason: chunk.lastReason))
        }
        if !tally.transient.isEmpty {
            var rng = runtime.generator
            switch retryPolicy.decide(failedAttempt: chunk.attempt, now: now, expiresAt: job.expiresAt, rng: &rng) {
            case .retry(let backoff):
                metrics.retries.increment(by: tally.transient.count)
                // The provider's Retry-After wins over a shorter backoff.
                // A Retry-After beyond an hour is capped: a tenant's quota error must not park tokens for years
                // (or past what a timestamp holds).
                let at = tally.retryAfter.map {
                    max(backoff, now.addingTimeInterval(Double(min(max($0.components.seconds, 0), Self.maximumRetryAfterSeconds))))
                } ?? backoff
                completion.requeued.append(RequeuedTokens(
                    tokens: tally.transient.map(\.token), attempt: chunk.attempt + 1, notBefore: at,
                    lastReason: tally.transient.last?.reason))
            case .giveUp:
                for failure in tally.transient {
                    completion.outcomes.append(FinalOutcome(
                        token: failure.token, status: failure.status, reason: failure.reason,
                        deliveryID: DeliveryID.make(jobID: chunk.jobID, token: failure.token), attempt: chunk.attempt, sentAt: now))
                }
            }
        }
        return completion
    }
}

import PGPushCore
import PGPushStore
import Synchronization

/// Counts configuration errors per app and provider and pauses the app after the first few in a row, so a
/// wrong credential or topic never burns through a broadcast. Counted per provider: an app's APNs successes
/// must not hide its FCM credential being refused. Pure; the worker shares it as ``AppHealth``, and its
/// verdict writer writes the pauses (``drainPauses()``).
struct AppHealthState: Sendable {
    let threshold: Int
    private var errors: [String: Int] = [:]
    private var paused: Set<PauseTarget> = []
    private var pendingPauses: [PauseTarget: String] = [:]
    /// Pauses handed out whose database write may not have landed yet; a sync must not undo them meanwhile.
    private var writing: Set<PauseTarget> = []

    init(threshold: Int) {
        self.threshold = max(1, threshold)
    }

    /// Whether the whole app is paused.
    func isPaused(_ app: String) -> Bool { !paused.isEmpty && paused.contains(.app(app)) }

    /// Whether the app's devices of `platform` wait: the app is paused, or, for web, its Web Push is.
    func isPaused(_ app: String, platform: DevicePlatform) -> Bool {
        // Asked twice per request: with nothing paused (the usual case) no key is built or hashed.
        guard !paused.isEmpty else { return false }
        return paused.contains(.app(app)) || (platform == .web && paused.contains(.webPush(app)))
    }

    mutating func recordSuccess(_ app: String, provider: String) {
        // Called once per answer: with no error counted (the usual case) no key is built.
        guard !errors.isEmpty else { return }
        let key = Self.key(app, provider)
        errors[key] = nil
    }

    /// A push service refusing an app's VAPID key says nothing of its APNs or FCM credentials: Web Push errors
    /// pause the app's Web Push only.
    mutating func recordConfigurationError(_ app: String, provider: String, reason: String) {
        let key = Self.key(app, provider)
        let count = (errors[key] ?? 0) + 1
        errors[key] = count
        let target: PauseTarget = provider == PushProvider.webpush.rawValue ? .webPush(app) : .app(app)
        if count >= threshold && !paused.contains(target) {
            paused.insert(target)
            pendingPauses[target] = reason
        }
    }

    /// Pauses to write to `push.apps`, each handed out once.
    mutating func drainPauses() -> [PauseTarget: String] {
        defer { pendingPauses = [:] }
        writing.formUnion(pendingPauses.keys)
        return pendingPauses
    }

    /// A pause whose write failed (the database was down): ``drainPauses()`` hands it out again.
    mutating func retryPause(_ target: PauseTarget, reason: String) {
        pendingPauses[target] = reason
    }

    /// Syncs with the database: a pause whose reason was cleared (`pgpush apps resume`) ends.
    mutating func sync(pausedInDatabase: Set<PauseTarget>) {
        // A pause this worker is still writing counts as written once the database shows it.
        writing.subtract(pausedInDatabase)
        for target in paused where !pausedInDatabase.contains(target) && pendingPauses[target] == nil && !writing.contains(target) {
            paused.remove(target)
            let prefix = target.appID + "|"
            errors = errors.filter { !$0.key.hasPrefix(prefix) || (target.webPushOnly && $0.key != prefix + PushProvider.webpush.rawValue) }
        }
        paused.formUnion(pausedInDatabase)
    }

    private static func key(_ app: String, _ provider: String) -> String { app + "|" + provider }
}

/// What a pause stops: a whole app (`push.apps.paused_reason`), or only its Web Push
/// (`push.apps.web_push_paused_reason`).
struct PauseTarget: Hashable, Sendable {
    var appID: String
    var webPushOnly: Bool

    static func app(_ id: String) -> PauseTarget { PauseTarget(appID: id, webPushOnly: false) }
    static func webPush(_ id: String) -> PauseTarget { PauseTarget(appID: id, webPushOnly: true) }

    /// The pauses `push.apps` holds now.
    static func paused(in apps: some Collection<AppRecord>) -> Set<PauseTarget> {
        var targets: Set<PauseTarget> = []
        for app in apps {
            if app.pausedReason != nil { targets.insert(.app(app.id)) }
            if app.webPushPausedReason != nil { targets.insert(.webPush(app.id)) }
        }
        return targets
    }
}

/// The worker's ``AppHealthState``, shared by the chunks in flight.
final class AppHealth: Sendable {
    private let state: Mutex<AppHealthState>

    init(threshold: Int) {
        state = Mutex(AppHealthState(threshold: threshold))
    }

    var threshold: Int { state.withLock(\.threshold) }
    func isPaused(_ app: String) -> Bool { state.withLock { $0.isPaused(app) } }
    func isPaused(_ app: String, platform: DevicePlatform) -> Bool { state.withLock { $0.isPaused(app, platform: platform) } }
    func recordSuccess(_ app: String, provider: PushProvider = .apns) {
        state.withLock { $0.recordSuccess(app, provider: provider.rawValue) }
    }
    func recordConfigurationError(_ app: String, provider: PushProvider = .apns, reason: String) {
        state.withLock { $0.recordConfigurationError(app, provider: provider.rawValue, reason: reason) }
    }
    func drainPauses() -> [PauseTarget: String] { state.withLock { $0.drainPauses() } }
    func retryPause(_ target: PauseTarget, reason: String) { state.withLock { $0.retryPause(target, reason: reason) } }
    func sync(pausedInDatabase: Set<PauseTarget>) { state.withLock { $0.sync(pausedInDatabase: pausedInDatabase) } }
}

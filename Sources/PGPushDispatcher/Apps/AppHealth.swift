import PGPushCore
import Synchronization

/// Counts configuration errors per app and provider and pauses the app after the first few in a row, so a
/// wrong credential or topic never burns through a broadcast. Counted per provider: an app's APNs successes
/// must not hide its FCM credential being refused. Pure; the worker shares it as ``AppHealth``, and its
/// verdict writer writes the pauses (``drainPauses()``).
struct AppHealthState: Sendable {
    let threshold: Int
    private var errors: [String: Int] = [:]
    private var paused: Set<String> = []
    private var pendingPauses: [String: String] = [:]
    /// Pauses handed out whose database write may not have landed yet; a sync must not undo them meanwhile.
    private var writing: Set<String> = []

    init(threshold: Int) {
        self.threshold = max(1, threshold)
    }

    func isPaused(_ app: String) -> Bool { paused.contains(app) }

    mutating func recordSuccess(_ app: String, provider: String) {
        let key = Self.key(app, provider)
        if errors[key] != nil { errors[key] = 0 }
    }

    mutating func recordConfigurationError(_ app: String, provider: String, reason: String) {
        let key = Self.key(app, provider)
        let count = (errors[key] ?? 0) + 1
        errors[key] = count
        if count >= threshold && !paused.contains(app) {
            paused.insert(app)
            pendingPauses[app] = reason
        }
    }

    /// Pauses to write to `push.apps`, each handed out once.
    mutating func drainPauses() -> [String: String] {
        defer { pendingPauses = [:] }
        writing.formUnion(pendingPauses.keys)
        return pendingPauses
    }

    /// A pause whose write failed (the database was down): ``drainPauses()`` hands it out again.
    mutating func retryPause(_ app: String, reason: String) {
        pendingPauses[app] = reason
    }

    /// Syncs with the database: an app whose `paused_reason` was cleared (`pgpush apps resume`) starts again.
    mutating func sync(pausedInDatabase: Set<String>) {
        // A pause this worker is still writing counts as written once the database shows it.
        writing.subtract(pausedInDatabase)
        for app in paused where !pausedInDatabase.contains(app) && pendingPauses[app] == nil && !writing.contains(app) {
            paused.remove(app)
            errors = errors.filter { !$0.key.hasPrefix(app + "|") }
        }
        paused.formUnion(pausedInDatabase)
    }

    private static func key(_ app: String, _ provider: String) -> String { app + "|" + provider }
}

/// The worker's ``AppHealthState``, shared by the chunks in flight.
final class AppHealth: Sendable {
    private let state: Mutex<AppHealthState>

    init(threshold: Int) {
        state = Mutex(AppHealthState(threshold: threshold))
    }

    var threshold: Int { state.withLock(\.threshold) }
    func isPaused(_ app: String) -> Bool { state.withLock { $0.isPaused(app) } }
    func recordSuccess(_ app: String, provider: PushProvider = .apns) {
        state.withLock { $0.recordSuccess(app, provider: provider.rawValue) }
    }
    func recordConfigurationError(_ app: String, provider: PushProvider = .apns, reason: String) {
        state.withLock { $0.recordConfigurationError(app, provider: provider.rawValue, reason: reason) }
    }
    func drainPauses() -> [String: String] { state.withLock { $0.drainPauses() } }
    func retryPause(_ app: String, reason: String) { state.withLock { $0.retryPause(app, reason: reason) } }
    func sync(pausedInDatabase: Set<String>) { state.withLock { $0.sync(pausedInDatabase: pausedInDatabase) } }
}
